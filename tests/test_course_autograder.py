"""`make autograder`: the zip follows Gradescope's contract. Unpacked into a temporary
AUTOGRADER_ROOT, setup.sh builds its own venv from an existing Python >= 3.12 and deletes the
reference solutions; run_autograder then writes a valid results.json for the reference (inside a
folder, as a zip often unpacks), the stubs, and a submission with a syntax error in one exercise.
(Slow: installs the pinned packages, from the pip cache in .cache/pip after the first run, and
grades three submissions.)"""

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grading import ROOT
from graders import catalog
from graders.course.bundle import build_autograder, grading_budget

# Slow (they build the release, an autograder venv, a class batch): `make test-course`, run by CI.
pytestmark = pytest.mark.course

# The interpreter the shared venv was built from: an "existing Python" for setup.sh's PYTHON.
BASE_PYTHON = Path(os.environ.get("GRADERS_TEST_PYTHON", Path(sys.base_prefix) / "bin" / "python3"))
VALID_STATUS = {"passed", "failed"}
VALID_VISIBILITY = {"hidden", "after_due_date", "after_published", "visible"}


def total(results: dict) -> int:
    """What a results.json is out of: Gradescope sums its tests' max_score (no top-level field)."""
    return sum(t["max_score"] for t in results["tests"])


@pytest.fixture(scope="module")
def autograder(tmp_path_factory):
    if not BASE_PYTHON.is_file():
        pytest.skip(f"no Python at {BASE_PYTHON} (set GRADERS_TEST_PYTHON)")
    # Built for a 30-minute limit: this machine is shared and the cache starts cold (warm-up skipped);
    # the 10-minute sizing is checked by arithmetic below.
    zip_path = build_autograder(tmp_path_factory.mktemp("dist") / "autograder.zip", minutes=30)
    root = tmp_path_factory.mktemp("autograder")
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(root / "source")
        modes = {info.filename: info.external_attr >> 16 for info in zf.infolist()}
    for name in ("setup.sh", "run_autograder"):  # zipfile does not restore modes; Gradescope does
        os.chmod(root / "source" / name, modes[name] & 0o777)
    env = dict(os.environ, AUTOGRADER_ROOT=str(root), PYTHON=str(BASE_PYTHON), GRADERS_SKIP_WARMUP="1",
               PIP_CACHE_DIR=str(ROOT / ".cache" / "pip"))
    env.pop("VIRTUAL_ENV", None)
    setup = subprocess.run(["bash", str(root / "source" / "setup.sh")], env=env, capture_output=True,
                           text=True, timeout=1500)
    assert setup.returncode == 0, setup.stdout[-2000:] + setup.stderr[-2000:]
    (root / "setup.log").write_text(setup.stdout)
    return zip_path, root, modes


def run_autograder(root: Path, fill) -> dict:
    submission = root / "submission"
    shutil.rmtree(submission, ignore_errors=True)
    shutil.rmtree(root / "results", ignore_errors=True)
    submission.mkdir()
    fill(submission)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env["AUTOGRADER_ROOT"] = str(root)
    subprocess.run([str(root / "source" / "run_autograder")], env=env, cwd=root, capture_output=True, timeout=900)
    results = json.loads((root / "results" / "results.json").read_text())
    assert_gradescope_shape(results)
    return results


def assert_gradescope_shape(results: dict) -> None:
    assert isinstance(results["score"], (int, float)) and isinstance(results["output"], str)
    for test in results["tests"]:
        assert {"name", "score", "max_score", "status", "output"} <= set(test), test
        assert test["status"] in VALID_STATUS and 0 <= test["score"] <= test["max_score"]
        assert test.get("visibility", "visible") in VALID_VISIBILITY
    assert results["score"] == sum(t["score"] for t in results["tests"])


def test_zip_has_setup_and_run_autograder_at_its_root_executable(autograder):
    _, _, modes = autograder
    for name in ("setup.sh", "run_autograder"):
        assert modes[name] & stat.S_IXUSR, name
    assert "graders/exercises/quiz/key.json" in modes and any(n.startswith("reference/") for n in modes)
    assert not any(n.startswith(("tests/", "exercises/")) for n in modes)


def test_setup_deletes_the_reference_and_builds_its_own_venv(autograder):
    _, root, _ = autograder
    assert not (root / "source" / "reference").exists()
    version = subprocess.run([str(root / "venv" / "bin" / "python"), "-c", "import jax; print(jax.__version__)"],
                             capture_output=True, text=True).stdout.strip()
    assert version == "0.12.0.1"


def test_setup_says_which_sandbox_level_the_image_has(autograder):
    from graders.child import sandbox

    _, root, _ = autograder
    said = [line for line in (root / "setup.log").read_text().splitlines() if line.startswith("Sandbox isolation")]
    assert said == [f"Sandbox isolation on this image: {sandbox.available() or sandbox.level()}"]


def test_run_autograder_sets_its_timeouts_in_one_place_sized_for_gradescope(autograder):
    _, root, _ = autograder
    text = (root / "source" / "run_autograder").read_text()
    lines = [line for line in text.splitlines() if line.startswith("RUNNER_ARGS=")]
    # every exercise by default, the quiz's results shown after the due date (README, step 3)
    assert lines == [f"RUNNER_ARGS=({' '.join(catalog.available())} --jobs 1 --budget {grading_budget(30)} --sandbox "
                     "--after-due quiz)"]
    assert grading_budget(10) < 10 * 60


def test_reference_in_a_folder_gets_full_marks(autograder):
    _, root, _ = autograder
    results = run_autograder(root, lambda sub: shutil.copytree(ROOT / "reference", sub / "my_homework"))
    assert results["score"] == total(results) > 0
    assert {ex["status"] for ex in results["extra_data"]["exercises"].values()} == {"passed"}


def test_stubs_get_zero_and_read_not_attempted(autograder):
    _, root, _ = autograder
    results = run_autograder(root, lambda sub: [shutil.copy(p, sub) for p in (ROOT / "exercises").glob("*.py")])
    assert results["score"] == 0
    assert {ex["status"] for ex in results["extra_data"]["exercises"].values()} == {"not attempted"}


def test_a_syntax_error_costs_only_its_exercise(autograder):
    _, root, _ = autograder
    broken = catalog.module_name("ex4")

    def fill(sub):
        for path in (ROOT / "reference").glob("*.py"):
            shutil.copy(path, sub)
        (sub / f"{broken}.py").write_text("def f(:\n    pass\n")

    results = run_autograder(root, fill)
    exercises = results["extra_data"]["exercises"]
    assert exercises["ex4"]["status"] == "error" and "SyntaxError" in exercises["ex4"]["reason"]
    assert all(ex["status"] == "passed" for i, ex in exercises.items() if i != "ex4")
    assert results["score"] == total(results) - exercises["ex4"]["max_score"]


def test_a_whole_working_folder_is_graded_from_exercises_and_says_what_is_missing(autograder):
    """Two stubs deleted from exercises/; reference/ beside it holds every module, solved."""
    _, root, _ = autograder
    gone = [f"{catalog.module_name(ex)}.py" for ex in ("ex3", "ex5")]

    def fill(sub):
        shutil.copytree(ROOT / "exercises", sub / "homework" / "exercises")
        for name in gone:
            (sub / "homework" / "exercises" / name).unlink()
        shutil.copytree(ROOT / "reference", sub / "homework" / "reference")
        shutil.copytree(ROOT / "graders", sub / "homework" / "graders")

    results = run_autograder(root, fill)
    assert results["extra_data"]["graded_folder"] == "submission/homework/exercises"
    assert results["extra_data"]["missing"] == gone
    assert "missing from submission/homework/exercises/: " + ", ".join(gone) in results["output"]
    assert results["score"] == 0  # the stubs, not reference/


def test_an_empty_submission_reads_missing_everywhere(autograder):
    _, root, _ = autograder
    results = run_autograder(root, lambda sub: (sub / "notes.txt").write_text("I ran out of time"))
    assert results["score"] == 0
    assert all(ex["reason"].startswith("missing") for ex in results["extra_data"]["exercises"].values())


def test_the_fallback_results_json_is_valid_when_grading_cannot_start(autograder, tmp_path):
    _, root, _ = autograder
    broken = tmp_path / "broken"  # no venv at all: run_autograder must still leave a results.json
    shutil.copytree(root / "source", broken / "source")
    (broken / "submission").mkdir()
    env = dict(os.environ, AUTOGRADER_ROOT=str(broken))
    subprocess.run([str(broken / "source" / "run_autograder")], env=env, capture_output=True, timeout=60)
    results = json.loads((broken / "results" / "results.json").read_text())
    assert_gradescope_shape(results)
    assert results["score"] == 0 and "could not run" in results["output"]
