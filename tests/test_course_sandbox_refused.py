"""--sandbox where `unshare` is refused otherwise than by a missing capability
(tests/test_course_weaker_sandbox.py drops CAP_SYS_ADMIN with capsh):

- by a seccomp filter, as a default Docker container's profile refuses it: the sandbox uses
  its "user" level, the reference gets full marks, and the report says so;
- inside a user namespace that maps the ids up to 65535 (as a rootless container runtime
  maps them): the namespaces can be made there, and the reference gets full marks at the
  level the sandbox reports;
- inside one that maps root alone (`unshare --map-root-user`): the user nobody does not exist
  there, so no level can be had; --sandbox refuses with the reason (exit status 2), never a
  traceback, and setup.sh's warm-up fails the build on it.

(Slow: each grades the reference under --sandbox. `make test-course`.)"""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from grading import ROOT
from graders import catalog
from graders.child import sandbox

pytestmark = [pytest.mark.course, pytest.mark.timeout(3600),
              pytest.mark.skipif(bool(sandbox.available()), reason=sandbox.available() or ""),
              pytest.mark.skipif(os.uname().machine != "x86_64", reason="the filter below is written for x86-64")]

def filter_program() -> list[tuple[int, int, int, int]]:
    """A seccomp filter refusing what Docker's default profile refuses a process without
    CAP_SYS_ADMIN: unshare, setns and clone with a new namespace's flag (EPERM), and clone3,
    whose flags it cannot read (ENOSYS: the C library falls back to clone). Labels resolved as
    graders/child/sandbox.py resolves its own."""
    unshare, setns, clone, clone3, arch = 272, 308, 56, 435, 0xC000003E
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06
    code = [
        ("", ld, None, None, 4),
        ("", jeq, None, "allow", arch),
        ("", ld, None, None, 0),
        ("", jeq, "perm", None, unshare),
        ("", jeq, "perm", None, setns),
        ("", jeq, "nosys", None, clone3),
        ("", jeq, None, "allow", clone),
        ("", ld, None, None, 16),
        ("", jset, "perm", "allow", 0x7E020000),
        ("allow", ret, None, None, 0x7FFF0000),
        ("perm", ret, None, None, 0x00050001),
        ("nosys", ret, None, None, 0x00050026),
    ]
    at = {label: i for i, (label, *_) in enumerate(code) if label}
    return [(op, 0 if yes is None else at[yes] - i - 1, 0 if no is None else at[no] - i - 1, k)
            for i, (_, op, yes, no, k) in enumerate(code)]


WRAPPER = textwrap.dedent("""
    import ctypes, os, struct, sys
    program = {program!r}
    raw = b"".join(struct.pack("HBBI", *insn) for insn in program)
    buffer = ctypes.create_string_buffer(raw, len(raw))
    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    libc = ctypes.CDLL(None, use_errno=True)
    fprog = Program(len(program), ctypes.addressof(buffer))
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        sys.exit("seccomp: " + os.strerror(ctypes.get_errno()))
    os.execvp(sys.argv[1], sys.argv[1:])
""")

# Runs a command in a new user namespace, its ids mapped by the parent (root outside) as `MAP` says.
USERNS = textwrap.dedent("""
    import os, sys
    mapping = sys.argv[1]
    r, w = os.pipe(); r2, w2 = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.unshare(os.CLONE_NEWUSER)
        os.write(w2, b"x"); os.read(r, 1)
        os.setgid(0); os.setuid(0)
        os.execvp(sys.argv[2], sys.argv[2:])
    os.read(r2, 1)
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/{pid}/{name}", "w") as f:
            f.write(mapping)
    os.write(w, b"x")
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status))
""")


def no_unshare(command: list[str]) -> list[str]:
    return [sys.executable, "-c", WRAPPER.format(program=filter_program()), *command]


def in_userns(mapping: str, command: list[str]) -> list[str]:
    return [sys.executable, "-c", USERNS, mapping, *command]


def grade_reference(wrapped, tmp_path, *ids: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "results.json"
    run = subprocess.run(wrapped([sys.executable, "-m", "graders", *ids, "--solutions", "reference", "--sandbox",
                                  "--jobs", "2", "--seed", "20261203", "--json", str(out)]),
                         cwd=ROOT, capture_output=True, text=True, timeout=2400)
    return run, (json.loads(out.read_text()) if out.is_file() else {})


def assert_full_marks(run, results, level: str) -> None:
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert results["extra_data"]["isolation"] == level and f"sandbox: {level}" in run.stdout
    assert {ex["status"] for ex in results["extra_data"]["exercises"].values()} == {"passed"}
    assert results["score"] == sum(t["max_score"] for t in results["tests"]) > 0


def test_the_filter_refuses_unshare_and_nothing_else_the_graders_need():
    probe = "import os\ntry:\n    os.unshare(os.CLONE_NEWNS)\nexcept OSError as e:\n    print(e.errno)\n"
    said = subprocess.run(no_unshare([sys.executable, "-c", probe]), capture_output=True, text=True, timeout=60)
    assert said.stdout.strip() == "1", said.stdout + said.stderr  # EPERM, as in a default container
    level = subprocess.run(no_unshare([sys.executable, "-c", "from graders.child import sandbox; print(sandbox.level())"]),
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert level.stdout.strip() == "user", level.stdout + level.stderr


def test_with_unshare_refused_by_seccomp_the_reference_gets_full_marks_at_the_user_level(tmp_path):
    run, results = grade_reference(no_unshare, tmp_path)
    assert set(results["extra_data"]["exercises"]) == set(catalog.available())
    assert_full_marks(run, results, "user")


def test_in_a_user_namespace_mapping_nobody_the_reference_gets_full_marks(tmp_path):
    def wrapped(command):
        return in_userns("0 0 65536\n", command)

    level = subprocess.run(wrapped([sys.executable, "-c", "from graders.child import sandbox; "
                                    "print(sandbox.available() or sandbox.level())"]),
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert level.stdout.strip() in sandbox.LEVELS, level.stdout + level.stderr
    run, results = grade_reference(wrapped, tmp_path)
    assert_full_marks(run, results, level.stdout.strip())


def test_in_a_user_namespace_mapping_root_alone_sandbox_refuses_with_the_reason(tmp_path):
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare (util-linux) here")

    def wrapped(command):
        return [unshare, "--user", "--map-root-user", "--", *command]

    run, results = grade_reference(wrapped, tmp_path, "ex4")
    assert run.returncode == 2 and results == {}, run.stdout[-2000:] + run.stderr[-2000:]
    assert "does not map" in run.stderr and "Traceback" not in run.stderr
