"""The learner's loop: rows as each exercise is done (also in a pipe), every check listed when
one exercise is graded, watch mode re-grading a saved file, and check() from a process that
imported JAX first."""

import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from grading import ROOT, grade
from graders import catalog
from graders.runner.points import read_checks

LOOPING_EX1 = "def tok_loss_sum_count(*args):\n    while True:\n        pass\n\n\naccum_token_weighted = tok_loss_sum_count\n"


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "graders", *args]


def test_rows_stream_as_exercises_finish_when_stdout_is_a_pipe(tmp_path):
    shutil.copy(ROOT / "reference" / "quiz.py", tmp_path)
    (tmp_path / "ex1_token_accumulation.py").write_text(LOOPING_EX1)
    proc = subprocess.Popen(_command("ex1", "quiz", "--solutions", str(tmp_path), "--timeout", "6"),
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.split()[:1] == ["quiz"]:
                # ex1 loops until its 6 s limit (the quiz takes about 1 s): the quiz's row must not wait for it
                assert proc.poll() is None, "the quiz row came only when the whole run was over"
                break
        rest = proc.stdout.read()
    finally:
        proc.wait(timeout=120)
    out = "".join(lines) + rest
    assert out.startswith("Grading ")
    assert "\r" not in out and "\x1b" not in out, "a live line leaked into a pipe"
    final = rest[rest.index("  id    exercise"):]
    table = [line.split()[0] for line in final.splitlines() if line.split()[:1] in (["ex1"], ["quiz"])]
    assert table[:2] == ["ex1", "quiz"], rest  # the final table keeps the order asked for


def test_a_terminal_shows_the_running_check_on_a_live_line():
    leader, follower = pty.openpty()
    proc = subprocess.Popen(_command("ex4", "--solutions", "reference"), cwd=ROOT,
                            stdout=follower, stderr=follower, stdin=subprocess.DEVNULL)
    os.close(follower)
    seen = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 120)
        if not ready:
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    proc.wait(timeout=120)
    os.close(leader)
    text = seen.decode("utf-8", "replace")
    assert "\r\x1b[K" in text and "ex4: " in text, text
    first_check = read_checks(catalog.grader_file("ex4"))[0].name
    assert first_check in text


def test_one_exercise_lists_every_check_with_its_points():
    run = grade(ROOT / "reference", ["ex4"])
    for check in read_checks(catalog.grader_file("ex4")):
        points = f"{check.points} pt{'s' if check.points != 1 else ''}"
        assert f"✓ {check.name} ({points})" in run.report, run.report


def test_several_exercises_stay_compact_unless_verbose():
    compact = grade(ROOT / "reference", ["ex4", "quiz"])
    verbose = grade(ROOT / "reference", ["ex4", "quiz"], "-v")
    # A passing check is listed in the compact report only when it explains itself (the quiz).
    assert not [c.name for c in read_checks(catalog.grader_file("ex4")) if f"✓ {c.name} " in compact.report]
    assert all(f"✓ {c.name} " in verbose.report
               for ex in ("ex4", "quiz") for c in read_checks(catalog.grader_file(ex)))


def _read_until(proc, words: str, timeout: float) -> str:
    seen, deadline = "", time.monotonic() + timeout
    os.set_blocking(proc.stdout.fileno(), False)
    while words not in seen:
        assert time.monotonic() < deadline, f"no {words!r} within {timeout} s; output:\n{seen}"
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if ready:
            chunk = proc.stdout.read()
            seen += chunk or ""
    return seen


def test_watch_regrades_a_saved_module_and_exits_zero_on_ctrl_c(tmp_path):
    for name in ("ex4_master_weights.py", "quiz.py"):
        shutil.copy(ROOT / "exercises" / name, tmp_path)
    points = {ex: sum(c.points for c in read_checks(catalog.grader_file(ex))) for ex in ("ex4", "quiz")}
    total = sum(points.values())
    proc = subprocess.Popen(_command("watch", "ex4", "quiz", "--solutions", str(tmp_path)), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first = _read_until(proc, f"0/2 exercises complete, 0/{total} points", 120)
        assert "not attempted" in first
        shutil.copy(ROOT / "reference" / "ex4_master_weights.py", tmp_path)
        second = _read_until(proc, f"1/2 exercises complete, {points['ex4']}/{total} points", 120)
        assert "ex4_master_weights.py changed: grading ex4" in second and "✓ " in second
        (tmp_path / "quiz.py").write_text("ANSWERS = {1: 'A'\n")  # a module that cannot be imported
        third = _read_until(proc, "1/2 exercises complete", 120)
        assert "could not import quiz.py: SyntaxError" in third
        assert proc.poll() is None, "watch stopped after a module failed to import"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("how", ["fork server", "kept fork server", "fresh interpreter"])
def test_ctrl_c_stops_the_running_exercises_at_once_and_shows_no_traceback(tmp_path, how):
    pid_file = tmp_path / "pid"
    (tmp_path / "ex1_token_accumulation.py").write_text(
        f"import os\n\ndef tok_loss_sum_count(*args):\n    open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "    while True:\n        pass\n\n\naccum_token_weighted = tok_loss_sum_count\n")
    short = tempfile.mkdtemp(prefix="cc-", dir="/tmp")  # a socket's path is at most 107 bytes
    env = dict(os.environ, TMPDIR=short)
    if how == "kept fork server":
        env.pop("GRADERS_NO_RESIDENT", None)
        env.pop("CI", None)
    if how == "fresh interpreter":
        env["GRADERS_NO_FORK"] = "1"
    # As from a terminal: a shell without job control (CI's) starts background commands with
    # SIGINT ignored, which the runner would inherit; a small launcher puts it back, then
    # becomes the runner (no preexec_fn: this process has JAX's threads).
    command = _command("ex1", "--solutions", str(tmp_path), "--timeout", "120")
    restore = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
               f"os.execv(sys.executable, {command!r})")
    proc = subprocess.Popen([sys.executable, "-c", restore], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline and proc.poll() is None, "the learner's loop never started"
            time.sleep(0.1)
        looping = int(pid_file.read_text())
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kept = list(Path(short).glob("graders-*/*.sock"))
        subprocess.run([sys.executable, "-c", "from graders.runner import kept_server; kept_server.stop_all()"], cwd=ROOT, env=env,
                       check=True)
        shutil.rmtree(short, ignore_errors=True)
    assert bool(kept) == (how == "kept fork server")
    assert proc.returncode == 130
    assert "interrupted" in out and "Traceback" not in out, out
    for _ in range(50):
        if not Path(f"/proc/{looping}").exists() or "Z" in Path(f"/proc/{looping}/stat").read_text().rsplit(") ", 1)[1][:1]:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the learner's looping code still runs after Ctrl-C")


def test_check_grades_in_a_child_from_a_process_that_imported_jax_first(tmp_path):
    program = textwrap.dedent(f"""
        import json, os, sys
        os.environ.pop("XLA_FLAGS", None)
        import jax, jax.numpy as jnp
        before = (jax.device_count(), jax.default_backend(), float(jnp.ones(3).sum()))
        sys.path.insert(0, {str(ROOT)!r})
        from graders import check
        r = check("ex4", solutions={str(ROOT / "reference")!r}, display=False)
        wrong = check("quiz", solutions={str(ROOT / "exercises")!r}, display=False)
        after = (jax.device_count(), jax.default_backend(), float(jnp.ones(3).sum()))
        print(json.dumps({{"score": r.score, "max": r.max_score, "status": r.status,
                          "checks": [[c.name, c.outcome] for c in r.checks], "before": before,
                          "after": after, "quiz": [wrong.status, wrong.score, wrong.checks[0].message]}}))
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PYTHONPATH")}
    proc = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["score"] == out["max"] > 0 and out["status"] == "passed"
    assert {name for name, _ in out["checks"]} == {c.name for c in read_checks(catalog.grader_file("ex4"))}
    assert out["before"] == out["after"] and out["before"][0] == 1  # the kernel's JAX untouched
    status, score, message = out["quiz"]
    assert (status, score) == ("not attempted", 0) and message.startswith("not attempted yet")
