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
import zipfile

import pytest

from grading import ROOT
from graders import catalog
from graders.child import sandbox

pytestmark = [pytest.mark.course, pytest.mark.timeout(3600),
              pytest.mark.skipif(bool(sandbox.available()), reason=sandbox.available() or "")]

CAPSH = shutil.which("capsh")


def dropped(command: list[str], cwd_=ROOT, **kwargs) -> subprocess.CompletedProcess:
    """`command` as root without CAP_SYS_ADMIN (as in a default container)."""
    if CAPSH is None:
        if os.environ.get("CI"):
            pytest.fail("capsh is missing (libcap2-bin): .ci/run installs it")
        pytest.skip("no capsh here (apt-get install libcap2-bin)")
    line = " ".join(subprocess.list2cmdline([c]) for c in command)
    return subprocess.run([CAPSH, "--drop=cap_sys_admin", "--", "-c", line], cwd=cwd_, capture_output=True,
                          text=True, **kwargs)


@pytest.fixture
def open_tmp():
    """A folder every user may enter, as /autograder is: pytest's own tmp_path sits under
    /tmp/pytest-of-root (0700), where nobody reaches nothing."""
    import tempfile
    from pathlib import Path

    folder = Path(tempfile.mkdtemp(prefix="graders-open-"))
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_package_nobody_can_reach_is_refused_with_the_reason(tmp_path):
    # pytest's tmp_path is under a 0700 folder: the user level could not read the graders there.
    package = tmp_path / "package"
    shutil.copytree(ROOT, package, symlinks=True,
                    ignore=shutil.ignore_patterns(".git", ".cache", "dist", "__pycache__", "tests"))
    run = dropped([sys.executable, "-m", "graders", "quiz", "--solutions", "reference", "--sandbox"],
                  timeout=300, cwd_=package)
    assert run.returncode == 2, run.stdout[-2000:] + run.stderr[-2000:]
    assert "nobody, who cannot enter" in run.stderr and "chmod o+x" in run.stderr, run.stderr[-2000:]


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


def test_the_autograder_built_and_run_without_cap_sys_admin_gives_the_reference_full_marks(open_tmp):
    """The whole Gradescope path in a default container: setup.sh (its warm-up grades the reference
    under --sandbox and fails the build otherwise) and run_autograder, both without CAP_SYS_ADMIN.
    An assignment of two exercises keeps it to a few minutes."""
    tmp_path = open_tmp
    from graders.course.bundle import build_autograder
    from test_course_autograder import BASE_PYTHON, assert_gradescope_shape

    if not BASE_PYTHON.is_file():
        pytest.skip(f"no Python at {BASE_PYTHON} (set GRADERS_TEST_PYTHON)")
    ids = ["ex4", "quiz"]
    root = tmp_path / "autograder"
    with zipfile.ZipFile(build_autograder(tmp_path / "autograder.zip", minutes=5, ids=ids)) as zf:
        zf.extractall(root / "source")
    for name in ("setup.sh", "run_autograder"):
        os.chmod(root / "source" / name, 0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "GRADERS_SKIP_WARMUP"))}
    env.update(AUTOGRADER_ROOT=str(root), PYTHON=str(BASE_PYTHON), PIP_CACHE_DIR=str(ROOT / ".cache" / "pip"))
    setup = dropped(["bash", str(root / "source" / "setup.sh")], env=env, timeout=2400)
    assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
    assert "Sandbox isolation on this image: user" in setup.stdout, setup.stdout[-2000:]

    (root / "submission").mkdir()
    for ex_id in ids:
        shutil.copy(ROOT / "reference" / f"{catalog.module_name(ex_id)}.py", root / "submission")
    env = {k: v for k, v in env.items() if k != "PYTHON"}
    dropped([str(root / "source" / "run_autograder")], env=env, timeout=600)
    results = json.loads((root / "results" / "results.json").read_text())
    assert_gradescope_shape(results)
    assert results["extra_data"]["isolation"] == "user"
    assert set(results["extra_data"]["exercises"]) == set(ids)
    assert results["score"] == sum(t["max_score"] for t in results["tests"]) > 0
