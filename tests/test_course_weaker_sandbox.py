"""--sandbox where namespaces cannot be made, as in a default Docker container (what
Gradescope-like services start): as root with CAP_SYS_ADMIN dropped (capsh), the sandbox falls
back to its "user" level (graders/child/sandbox.py). The reference still gets full marks, the
report says which level was used, and the promises that level makes still hold:
tests/test_sandbox.py and tests/test_attacks.py are run again under it, and each adapts its few
level-dependent expectations to sandbox.level(). (Slow: `make test-course`, run by CI, which
installs capsh: .ci/run.)"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from grading import ROOT
from graders import catalog
from graders.child import sandbox

pytestmark = [pytest.mark.course, pytest.mark.timeout(3600),
              pytest.mark.skipif(bool(sandbox.available()), reason=sandbox.available() or "")]

CAPSH = shutil.which("capsh")


def dropped(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    """`command` as root without CAP_SYS_ADMIN (as in a default container)."""
    if CAPSH is None:
        if os.environ.get("CI"):
            pytest.fail("capsh is missing (libcap2-bin): .ci/run installs it")
        pytest.skip("no capsh here (apt-get install libcap2-bin)")
    line = " ".join(subprocess.list2cmdline([c]) for c in command)
    return subprocess.run([CAPSH, "--drop=cap_sys_admin", "--", "-c", line], cwd=ROOT, capture_output=True,
                          text=True, **kwargs)


def test_the_reference_gets_full_marks_at_the_user_level(tmp_path):
    out = tmp_path / "results.json"
    run = dropped([sys.executable, "-m", "graders", "--solutions", "reference", "--sandbox", "--jobs", "2",
                   "--seed", "20261203", "--json", str(out)], timeout=1800)
    results = json.loads(out.read_text())
    assert run.returncode == 0, run.stdout[-3000:]
    assert results["extra_data"]["isolation"] == "user"
    assert "sandbox: user" in run.stdout
    exercises = results["extra_data"]["exercises"]
    assert set(exercises) == set(catalog.available())
    assert {ex["status"] for ex in exercises.values()} == {"passed"}
    assert results["score"] == sum(t["max_score"] for t in results["tests"]) > 0


def test_a_sandbox_that_cannot_be_made_is_the_autograders_fault(tmp_path):
    out = tmp_path / "results.json"
    # told to make namespaces where it cannot: every exercise fails to start, none by the learner's doing
    env = dict(os.environ, GRADERS_SANDBOX_LEVEL="namespaces")
    dropped([sys.executable, "-m", "graders", "ex4", "quiz", "--solutions", "reference", "--sandbox",
             "--json", str(out)], timeout=600, env=env)
    for ex in json.loads(out.read_text())["extra_data"]["exercises"].values():
        assert ex["status"] == "error" and ex["autograder_fault"]
        assert ex["reason"].startswith("the autograder failed, not your code")
        assert "output from your code" not in ex["reason"] and "Traceback" not in ex["reason"]


@pytest.mark.parametrize("tests", ["tests/test_sandbox.py", "tests/test_attacks.py"])
def test_the_sandbox_promises_hold_at_the_user_level(tests):
    run = dropped([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", tests], timeout=3000)
    assert run.returncode == 0, run.stdout[-4000:]
    assert " passed" in run.stdout and "skipped" not in run.stdout.splitlines()[-1], run.stdout[-500:]
