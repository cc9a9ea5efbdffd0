"""Under --sandbox, learner code cannot read what it must not (reference/, the quiz key, other
students' folders, other processes), cannot write the package, the results or the compilation
cache, has no network, and cannot outlive its exercise. Each probe below is an Exercise 4
module that tries, records what it managed, and reports it through the one channel it has: the
reason of its own failed import.

The promises hold at both levels of graders/child/sandbox.py but one: at the "user" level (no
namespaces: a default container) other processes stay visible, never readable. Run as root with
CAP_SYS_ADMIN dropped (tests/test_course_weaker_sandbox.py does), this file tests that level."""

import json
import os
import textwrap
import time
from pathlib import Path

import pytest

from grading import ROOT, alive_with_seed, grade
from graders import catalog
from graders.child import sandbox

pytestmark = pytest.mark.skipif(bool(sandbox.available()), reason=sandbox.available() or "")

PROBE = '''
import json, os, socket, subprocess, sys
from pathlib import Path
ROOT = Path({root!r})
found = {{}}
def attempt(name, fn):
    try:
        found[name] = fn()
    except Exception as exc:
        found[name] = "denied: " + type(exc).__name__[:5]  # short: the message has room for 600 characters

attempt("reference", lambda: sorted(os.listdir(ROOT / "reference")))
attempt("import_reference", lambda: __import__("reference.ex4_master_weights").__name__)
attempt("tests", lambda: sorted(os.listdir(ROOT / "tests")))
attempt("quiz_key", lambda: [open(p).read() for p in {secrets!r} if os.path.exists(p)])
attempt("sibling", lambda: Path({sibling!r}).read_text())
attempt("checks_source", lambda: Path({checks!r}).read_text())
attempt("checks_bytecode", lambda: os.listdir(Path({checks!r}).parent / "__pycache__"))
attempt("checks_loaded", lambda: sorted(m for m in sys.modules if m.endswith(".checks")))
attempt("write_grader", lambda: open({quiz_checks!r}, "a").write("#"))
attempt("shared_tmp", lambda: open("/tmp/zz_sandbox_probe", "w").write("x"))
attempt("write_cache", lambda: open(Path({cache!r}) / "poison", "w").write("x"))
attempt("write_results", lambda: open({results!r}, "w").write("{{}}"))
attempt("expected", lambda: (os.listdir({expected!r}), open(Path({expected!r}) / "poison.json", "w").write("x")))
attempt("exp_env", lambda: "GRADERS_EXPECTED_DIR" in os.environ)
attempt("processes", lambda: sorted(int(p) for p in os.listdir("/proc") if p.isdigit())[:3])
attempt("uid", lambda: os.getuid())
attempt("network", lambda: socket.create_connection(("127.0.0.1", 9), timeout=1) and "connected")
# A daemon: double fork and setsid, then write a file outside after the run is over.
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        import time
        for _ in range(40):
            time.sleep(0.25)
            try:
                open({marker!r}, "w").write("alive")
            except OSError:
                pass
        os._exit(0)
    os._exit(0)
raise RuntimeError("FOUND" + json.dumps(found) + "END")
'''


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    base = tmp_path_factory.mktemp("class")
    student, other = base / "alice", base / "bob"
    student.mkdir()
    other.mkdir()
    (other / "ex4_master_weights.py").write_text("SECRET = 'bob'\n")
    marker = base / "daemon-was-here"
    results = base / "results.json"
    cache = ROOT / ".cache" / "jax"
    expected = ROOT / ".cache" / "expected"  # the graders' own figures (graders/kit/memo.py)
    expected.mkdir(parents=True, exist_ok=True)
    (student / "ex4_master_weights.py").write_text(PROBE.format(
        root=str(ROOT), secrets=[str(p) for p in catalog.secrets()], sibling=str(other / "ex4_master_weights.py"),
        cache=str(cache), results=str(results), marker=str(marker), expected=str(expected),
        checks=str(catalog.grader_file("ex4")), quiz_checks=str(catalog.grader_file("quiz"))))
    before = {p: p.read_bytes() for p in (ROOT / "graders").rglob("*.py")}
    # The checks' bytecode, as a maintainer's own pytest run may leave it: hidden too.
    import importlib.util
    import py_compile

    grader = catalog.grader_file("ex4")
    bytecode = Path(importlib.util.cache_from_source(str(grader)))
    made = not bytecode.exists()
    py_compile.compile(str(grader), cfile=str(bytecode))
    try:
        run = grade(student, ["ex4"], "--sandbox", "--seed", "424242")
    finally:
        if made:
            bytecode.unlink()
            if not any(bytecode.parent.iterdir()):
                bytecode.parent.rmdir()
    left = alive_with_seed(424242)
    time.sleep(3)  # the daemon would have written by now
    reason = run.exercise("ex4")["reason"]
    found = json.loads(reason[reason.index("FOUND") + 5:reason.index("END")])
    return {"found": found, "run": run, "marker": marker, "before": before, "cache": cache, "left": left,
            "expected": expected}


def test_reference_tests_and_secrets_are_not_there(probe):
    found = probe["found"]
    assert str(found["reference"]).startswith("denied") and str(found["tests"]).startswith("denied")
    assert str(found["import_reference"]).startswith("denied")
    secrets = [p for p in catalog.secrets() if p.exists()]
    assert secrets, "the package has a secret to hide (the quiz key)"
    # each secret is covered by a device node that cannot be opened (or reads empty)
    assert found["quiz_key"] == [""] * len(secrets) or str(found["quiz_key"]).startswith("denied"), found["quiz_key"]


def test_the_checks_are_not_there(probe):
    # ex4 has probes: its learner code runs in a worker that never holds the checks, their
    # bytecode or their module, and whose grader files read empty.
    found = probe["found"]
    assert catalog.has_probes("ex4")
    assert found["checks_source"] == "" or str(found["checks_source"]).startswith("denied"), found["checks_source"]
    assert found["checks_bytecode"] == [] or str(found["checks_bytecode"]).startswith("denied"), found["checks_bytecode"]
    assert found["checks_loaded"] == [], found["checks_loaded"]


def test_the_graders_stored_figures_are_not_there(probe):
    """The judge's store of its own figures (graders/kit/memo.py) is neither shown nor named to the worker."""
    found = probe["found"]
    assert str(found["expected"]).startswith("denied"), found["expected"]  # neither read nor written
    assert found["exp_env"] is False


def test_other_students_are_not_there(probe):
    assert str(probe["found"]["sibling"]).startswith("denied")


def test_package_cache_and_results_cannot_be_written(probe):
    found = probe["found"]
    for attempt in ("write_grader", "write_cache", "write_results", "expected"):
        assert str(found[attempt]).startswith("denied"), (attempt, found[attempt])
    assert {p: p.read_bytes() for p in (ROOT / "graders").rglob("*.py")} == probe["before"]
    assert not (probe["cache"] / "poison").exists()
    assert not (probe["expected"] / "poison.json").exists()


def test_runs_as_nobody_alone_and_offline(probe):
    found = probe["found"]
    assert found["uid"] == sandbox.NOBODY
    if sandbox.level() == "namespaces":
        assert found["processes"] == [1], found["processes"]  # no other process is visible
    assert str(found["network"]).startswith("denied")


def test_the_report_names_the_level(probe):
    assert probe["run"].results["extra_data"]["isolation"] == sandbox.level()
    assert f"sandbox: {sandbox.level()}" in probe["run"].report


def test_nothing_is_left_in_the_shared_scratch_folders(probe):
    # a private /tmp ("namespaces"), or what nobody wrote there removed when the run ended ("user")
    assert not Path("/tmp/zz_sandbox_probe").exists()


def test_nothing_it_started_outlives_the_exercise(probe):
    assert probe["left"] == [], "processes of the run were alive when it ended"
    assert not probe["marker"].exists(), "a daemon started by the submission was still running after the run"
    assert probe["run"].exercise("ex4")["status"] == "error"


def test_an_endless_loop_is_stopped_with_everything_it_started(tmp_path):
    marker = tmp_path / "still-running"
    (tmp_path / "ex4_master_weights.py").write_text(textwrap.dedent(f"""
        import os, time
        if os.fork() == 0:
            os.setsid()
            while True:
                time.sleep(0.2)
                try:
                    open({str(marker)!r}, "a").write(".")
                except OSError:
                    pass
        while True:
            pass
    """))
    # the loop runs at import: any limit shows it stopped (and everything it started gone)
    run = grade(tmp_path, ["ex4"], "--sandbox", "--timeout", "4", "--seed", "434343")
    assert run.exercise("ex4")["status"] == "timed out"
    assert alive_with_seed(434343) == []
    assert not marker.exists()


def test_without_root_the_sandbox_refuses_and_says_why(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "--sandbox needs root" in sandbox.available()


def test_honest_code_gets_the_same_verdicts_in_the_sandbox():
    plain = grade(ROOT / "reference", ["ex1", "ex4", "quiz"])
    boxed = grade(ROOT / "reference", ["ex1", "ex4", "quiz"], "--sandbox")
    for ex_id in ("ex1", "ex4", "quiz"):
        assert boxed.exercise(ex_id)["checks"] == {
            name: dict(check, seconds=boxed.exercise(ex_id)["checks"][name]["seconds"])
            for name, check in plain.exercise(ex_id)["checks"].items()}
    stubs = grade(ROOT / "exercises", ["quiz"], "--sandbox")
    assert stubs.exercise("quiz")["status"] == "not attempted"
