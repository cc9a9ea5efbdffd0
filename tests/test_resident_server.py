"""The fork server kept between runs (graders/runner/kept_server.py): a second run is forked from the
server the first one left; a change to what the server has read starts another; it leaves when
idle or when its name is removed; a runner that stops takes its exercises with it; the child
sees the runner's environment; and it is never used where a run must stand alone."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from grading import ROOT
from graders import catalog
from graders.child import session
from graders.runner import grading, launch, kept_server

LOOPING_EX1 = "def tok_loss_sum_count(*args):\n    while True:\n        pass\n\n\naccum_token_weighted = tok_loss_sum_count\n"
LEAVES_WITHIN = 3 * 2.0 + 5  # seconds: a few of the server's polls (RESIDENT_POLL), and slack for a busy machine


@pytest.fixture
def own_folder(monkeypatch):
    """A socket folder of the test's own (short: a socket's path is at most 107 bytes), and every
    server started in it stopped at the end."""
    base = tempfile.mkdtemp(prefix="rs-", dir="/tmp")
    # Only the kept servers' lookup is pointed there: the process-wide tempfile.tempdir would
    # also move the temporary folders of the corpora graded meanwhile in the background
    # (tests/conftest.py), which this teardown then removed under them.
    monkeypatch.setattr(kept_server, "tempfile", _Here(base))
    started: list[int] = []
    yield started
    kept_server.stop_all()
    # Ended at once: leaving on its own once its socket is gone is what the tests below prove,
    # and waiting a few of its polls after each test cost the suite 20 s.
    for pid in {*started, *_servers_in(base)}:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    shutil.rmtree(base, ignore_errors=True)


class _Here:
    """A tempfile whose temporary folder is the test's own."""

    def __init__(self, base: str):
        self.base = base

    def gettempdir(self) -> str:
        return self.base


def _servers_in(base: str) -> list[int]:
    """The kept servers whose socket is in `base` (started by a run the test made, not by it)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--listen" in argv and any(a.startswith(base.encode() + b"/") for a in argv):
            found.append(int(proc.name))
    return found


def _env(**extra) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in ("GRADERS_NO_RESIDENT", "CI")}
    return grading.Options(seed=7).env(dict(base, **extra))


def _launcher(env, started, ids=("ex1",)) -> launch.ForkServer:
    launcher = launch.launcher(list(ids), env, keep=True)
    assert isinstance(launcher, launch.ForkServer) and launcher.kept
    launcher._ready.wait(120)
    assert launcher.server_pid, "the kept server never said it was ready"
    if launcher.server_pid not in started:
        started.append(launcher.server_pid)
    return launcher


def _alive(pid: int) -> bool:
    """Whether any thread of the process still runs (its main thread can be a zombie while
    another, e.g. OpenBLAS's, still holds the process's sockets open)."""
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            if (task / "stat").read_text().rsplit(") ", 1)[1][0] != "Z":
                return True
        except (OSError, IndexError):
            continue
    return False


def _wait_gone(pid: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return not _alive(pid)


def test_a_second_run_is_forked_from_the_server_the_first_run_left(own_folder):
    env = _env()
    first = _launcher(env, own_folder)
    result = grading.grade_exercise("ex1", ROOT / "reference", grading.Options(seed=7), first)
    first.close()
    assert result.score == result.max_score
    assert _alive(first.server_pid), "the server should outlive the run that started it"
    second = _launcher(env, own_folder)
    try:
        assert second.server_pid == first.server_pid
        result = grading.grade_exercise("ex1", ROOT / "reference", grading.Options(seed=7), second)
        assert result.score == result.max_score, result.checks
    finally:
        second.close()


def test_the_name_changes_with_what_the_server_has_read_and_only_with_that(monkeypatch, tmp_path):
    env = _env()
    name = kept_server.key(env, sys.executable, ["jax"])
    assert kept_server.key(dict(env, _="/usr/bin/make", SHLVL="4", PWD="/elsewhere"), sys.executable, ["jax"]) == name
    assert kept_server.key(dict(env, XLA_FLAGS=env["XLA_FLAGS"] + " --xla_dump_to=/tmp/x"), sys.executable, ["jax"]) != name
    assert kept_server.key(dict(env, JAX_ENABLE_X64="1"), sys.executable, ["jax"]) != name
    assert kept_server.key(env, sys.executable, ["jax", "optax"]) != name
    # An edit to any file of graders/ (here, of a copy of it).
    copy = tmp_path / "graders"
    shutil.copytree(catalog.GRADERS_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(catalog, "GRADERS_DIR", copy)
    before = kept_server.key(env, sys.executable, ["jax"])
    target = copy / "exercises" / "ex6_nnx_block_remat" / "probes.py"
    os.utime(target, ns=(target.stat().st_atime_ns, target.stat().st_mtime_ns + 1_000_000))
    edited = kept_server.key(env, sys.executable, ["jax"])
    assert edited != before
    # Another file with the same name, size and time of change (as `cp -a` or `tar x` leave it).
    shutil.copy2(target, tmp_path / "other")
    os.replace(tmp_path / "other", target)
    replaced = kept_server.key(env, sys.executable, ["jax"])
    assert replaced != edited
    # What a run writes itself (bytecode), and an editor's lock file (a link to nowhere), are not
    # what the server has read.
    (copy / "exercises" / "ex6_nnx_block_remat" / "__pycache__").mkdir()
    (copy / "exercises" / "ex6_nnx_block_remat" / "__pycache__" / "probes.cpython-312.pyc").write_bytes(b"")
    (copy / "exercises" / "ex1_token_accumulation" / ".#checks.py").symlink_to("root@host.1234:1700000000")
    assert kept_server.key(env, sys.executable, ["jax"]) == replaced


# What a notebook server, an IDE or a login sets for each kernel, window or session it starts
# (values as each sets them).
PER_PROCESS = [
    {"JPY_PARENT_PID": "4242", "JPY_SESSION_NAME": "/home/u/course/ex1.ipynb", "KERNEL_ID": "0b7c-11",
     "JUPYTER_SERVER_URL": "http://localhost:8888/", "JUPYTERHUB_API_TOKEN": "a1", "JPY_API_TOKEN": "a1",
     "VSCODE_PID": "900", "VSCODE_IPC_HOOK_CLI": "/run/user/0/vscode-ipc-1.sock", "PYCHARM_DISPLAY_PORT": "63342",
     "SSH_AUTH_SOCK": "/tmp/ssh-XX/agent.1", "XDG_SESSION_ID": "3", "INVOCATION_ID": "c0ffee"},
    {"JPY_PARENT_PID": "5151", "JPY_SESSION_NAME": "/home/u/other/ex2.ipynb", "KERNEL_ID": "9d2e-77",
     "JUPYTER_SERVER_URL": "http://localhost:8889/", "JUPYTERHUB_API_TOKEN": "b2", "JPY_API_TOKEN": "b2",
     "VSCODE_PID": "901", "VSCODE_IPC_HOOK_CLI": "/run/user/0/vscode-ipc-2.sock", "PYCHARM_DISPLAY_PORT": "63343",
     "SSH_AUTH_SOCK": "/tmp/ssh-YY/agent.2", "XDG_SESSION_ID": "4", "INVOCATION_ID": "beef"},
]


def test_kernels_and_editor_windows_share_the_name():
    env = _env()
    assert {kept_server.key(dict(env, **extra), sys.executable, ["jax"]) for extra in PER_PROCESS} == {
        kept_server.key(env, sys.executable, ["jax"])}


# About 10 s (two processes and a server): a course test. make test has the name test above, and
# two runs with different such variables sharing a server in the_child_sees_the_runners_current_environment.
@pytest.mark.course
def test_two_notebook_kernels_share_one_kept_server(own_folder):
    """Two kernels of one user (processes whose Jupyter, IDE and session variables differ) grade
    with check() from one kept server."""
    program = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from graders import check; "
               f"r = check('ex1', solutions={str(ROOT / 'reference')!r}, display=False); print(r.score, r.max_score)")
    base = {k: v for k, v in os.environ.items() if k not in ("GRADERS_NO_RESIDENT", "CI")}
    for extra in PER_PROCESS:
        proc = subprocess.run([sys.executable, "-c", program], cwd=kept_server.tempfile.gettempdir(), capture_output=True,
                              text=True, timeout=300, env=dict(base, TMPDIR=kept_server.tempfile.gettempdir(), **extra))
        assert proc.returncode == 0, proc.stderr
        score, most = proc.stdout.split()
        assert score == most
    assert len(list(Path(kept_server.tempfile.gettempdir()).glob("graders-*/*.sock"))) == 1
    assert len(_servers_in(kept_server.tempfile.gettempdir())) == 1


def test_the_name_changes_with_the_settings_a_child_inherits():
    import resource

    env = _env()
    name = kept_server.key(env, sys.executable, ["jax"])
    mask = os.umask(0o077)
    try:
        assert kept_server.key(env, sys.executable, ["jax"]) != name
    finally:
        os.umask(mask)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})  # pytest-timeout's signal
    try:
        assert kept_server.key(env, sys.executable, ["jax"]) != name
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft - 1, hard))
    try:
        assert kept_server.key(env, sys.executable, ["jax"]) != name
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert kept_server.key(env, sys.executable, ["jax"]) == name


@pytest.mark.parametrize("text", ["abc", "nan", "inf", "-5", "0"])
def test_an_idle_time_that_is_no_time_is_the_default(text):
    assert kept_server.idle_seconds({"GRADERS_RESIDENT_IDLE": text}) == kept_server.IDLE_SECONDS


def test_another_environment_gets_a_server_of_its_own(own_folder):
    one = _launcher(_env(), own_folder)
    other = _launcher(_env(JAX_ENABLE_X64="0"), own_folder)
    try:
        assert one.server_pid != other.server_pid
    finally:
        one.close()
        other.close()


def test_the_child_sees_the_runners_current_environment(own_folder, tmp_path):
    """OLDPWD is set by the shell, JPY_PARENT_PID by Jupyter for each kernel, the seed and the
    time limit of a check are read by the grading child alone: runs that differ only there share
    a server, and each child sees its runner's values."""
    (tmp_path / "ex1_token_accumulation.py").write_text(
        "import os\nSEEN = [os.environ.get(k) for k in ('OLDPWD', 'GRADERS_SEED', 'GRADERS_CHECK_TIMEOUT', 'JPY_PARENT_PID')]\n")
    servers = []
    for seed, oldpwd, timeout, kernel in ((11, "/first", 30.0, PER_PROCESS[0]), (12, "/second", 40.0, PER_PROCESS[1])):
        env = grading.Options(seed=seed, timeout=timeout).env(dict(_env(), OLDPWD=oldpwd, **kernel))
        launcher = _launcher(env, own_folder)
        try:
            run = launcher.run("ex1", tmp_path, 60, extra={"extract": ["SEEN"]})
        finally:
            launcher.close()
        servers.append(launcher.server_pid)
        data = next(e for e in run.events if e.get("event") == "data")
        assert session.unplain(data["values"]["SEEN"]) == [oldpwd, str(seed), f"{timeout:g}", kernel["JPY_PARENT_PID"]]
    assert servers[0] == servers[1]


def test_a_large_environment_is_still_served_by_the_kept_server(own_folder, tmp_path):
    (tmp_path / "ex1_token_accumulation.py").write_text("import os\nSEEN = len(os.environ['BIG1'] + os.environ['BIG2'])\n")
    # More than one message holds (each variable under the kernel's limit for one)
    launcher = _launcher(_env(BIG1="x" * 120_000, BIG2="y" * 120_000), own_folder)
    try:
        run = launcher.run("ex1", tmp_path, 60, extra={"extract": ["SEEN"]})
    finally:
        launcher.close()
    assert launcher._private is None, "the run fell back to a server of its own"
    assert next(e for e in run.events if e.get("event") == "data")["values"]["SEEN"] == 240_000


def test_numpys_global_random_state_differs_from_run_to_run(own_folder, tmp_path):
    """As in a process of its own: a learner's unseeded np.random is not the same every run."""
    (tmp_path / "ex1_token_accumulation.py").write_text("import numpy\nDRAW = float(numpy.random.rand())\n")
    draws = []
    for _ in range(2):
        launcher = _launcher(_env(), own_folder)
        try:
            run = launcher.run("ex1", tmp_path, 60, extra={"extract": ["DRAW"]})
        finally:
            launcher.close()
        draws.append(next(e for e in run.events if e.get("event") == "data")["values"]["DRAW"])
    assert draws[0] != draws[1]


def test_an_idle_server_leaves_and_the_next_run_starts_another(own_folder):
    env = _env(GRADERS_RESIDENT_IDLE="1")
    first = _launcher(env, own_folder)
    first.close()
    assert _wait_gone(first.server_pid, 1 + LEAVES_WITHIN), "an idle server should leave"
    second = _launcher(env, own_folder)
    try:
        assert second.server_pid != first.server_pid
        result = grading.grade_exercise("ex1", ROOT / "reference", grading.Options(seed=7), second)
        assert result.score == result.max_score
    finally:
        second.close()


def test_removing_its_name_stops_a_server(own_folder):
    launcher = _launcher(_env(), own_folder)
    launcher.close()
    assert kept_server.stop_all() == 1
    assert _wait_gone(launcher.server_pid, LEAVES_WITHIN)


def test_a_server_killed_between_runs_is_replaced(own_folder):
    env = _env()
    first = _launcher(env, own_folder)
    first.close()
    os.kill(first.server_pid, 9)
    assert _wait_gone(first.server_pid, 10)
    second = _launcher(env, own_folder)  # its socket's name is still there, and refuses
    try:
        assert second.server_pid != first.server_pid
    finally:
        second.close()


def test_a_runner_that_stops_takes_its_running_exercise_with_it(own_folder, tmp_path):
    (tmp_path / "ex1_token_accumulation.py").write_text(LOOPING_EX1)
    launcher = _launcher(_env(), own_folder)
    runner = threading.Thread(target=lambda: launcher.run("ex1", tmp_path, 120), daemon=True)
    runner.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not launcher._replies:
        time.sleep(0.05)
    child = next(iter(launcher._replies.values())).get("pid")
    assert child and _alive(child)
    launcher.close()  # as a runner's end does: Ctrl-C, a crash
    assert _wait_gone(child, 10), "the exercise of a runner that is gone should be killed"
    assert _alive(launcher.server_pid), "the server itself should stay for the next run"


@pytest.mark.parametrize("env_change, why", [({"CI": "true"}, "CI"), ({"GRADERS_NO_RESIDENT": "1"}, "asked not to")])
def test_no_server_is_kept_where_a_run_must_stand_alone(own_folder, env_change, why):
    launcher = launch.launcher(["ex1"], _env(**env_change), keep=True)
    try:
        assert not getattr(launcher, "kept", False), why
    finally:
        launcher.close()
    assert not list(Path(kept_server.tempfile.gettempdir()).glob("graders-*/*.sock"))


def test_runs_that_do_not_ask_for_it_never_keep_a_server(own_folder):
    for launcher in (launch.launcher(["ex1"], _env()), launch.launcher(["quiz"], _env(), keep=True)):
        try:
            assert not getattr(launcher, "kept", False)
        finally:
            launcher.close()
    assert not list(Path(kept_server.tempfile.gettempdir()).glob("graders-*/*.sock"))


def test_a_folder_others_can_enter_is_not_used(own_folder):
    where = kept_server.folder()
    assert where is not None
    where.chmod(0o755)
    assert kept_server.folder() is None
    assert kept_server.connect(_env(), sys.executable, ["jax"]) is None


def test_make_grade_uses_the_kept_server_unless_asked_not_to(own_folder):
    env = {k: v for k, v in os.environ.items() if k not in ("GRADERS_NO_RESIDENT", "CI")}
    env["TMPDIR"] = kept_server.tempfile.gettempdir()
    for keep, kept in (("0", False), ("", True)):
        proc = subprocess.run(["make", "--no-print-directory", "grade", "EX=ex1", "SOLUTIONS=reference", f"KEEP_SERVER={keep}"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert bool(list(Path(kept_server.tempfile.gettempdir()).glob("graders-*/*.sock"))) == kept
    # Another exercise, by make or by hand: the same server (make's own variables are not
    # handed to the runner's environment).
    for command in (["make", "--no-print-directory", "grade", "EX=ex4", "SOLUTIONS=reference"],
                    [sys.executable, "-m", "graders", "ex4", "--solutions", "reference"]):
        proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert len(list(Path(kept_server.tempfile.gettempdir()).glob("graders-*/*.sock"))) == 1, command


def test_check_in_a_notebook_keeps_a_server_for_the_next_call(own_folder, monkeypatch):
    from graders import check

    monkeypatch.delenv("GRADERS_NO_RESIDENT", raising=False)
    monkeypatch.delenv("CI", raising=False)
    result = check("ex1", solutions=ROOT / "reference", display=False)
    assert result.score == result.max_score
    assert list(Path(kept_server.tempfile.gettempdir()).glob("graders-*/*.sock")), "check() should keep its server"


def test_the_readme_says_how_long_a_kept_server_waits():
    minutes = kept_server.IDLE_SECONDS / 60
    for doc in ("README.md", "graders/PERFORMANCE.md"):  # Troubleshooting, and the maintainers' notes
        assert f"{minutes:g} minutes without a run" in (ROOT / doc).read_text(), doc


def test_a_run_whose_kept_server_dies_grades_on_a_server_of_its_own(own_folder):
    launcher = _launcher(_env(), own_folder)
    try:
        os.kill(launcher.server_pid, 9)
        assert _wait_gone(launcher.server_pid, 10)
        result = grading.grade_exercise("ex1", ROOT / "reference", grading.Options(seed=7), launcher)
        assert result.score == result.max_score, result.checks
        assert launcher._private is not None and launcher._private.server_pid != launcher.server_pid
    finally:
        launcher.close()
