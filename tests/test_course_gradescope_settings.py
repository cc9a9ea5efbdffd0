"""An autograder built with the instructor's settings, as `make autograder EX="ex4 quiz" MINUTES=2
SEED=per-submission` makes it (the quiz shown after the due date, the default), set up with its
warm-up (the reference graded under --sandbox) in a temporary AUTOGRADER_ROOT and run on a few
submissions: only the assignment's exercises are graded, the quiz says nothing before the due
date, each submission draws its own seed, a submission that loops in every exercise still gets
a complete results.json within the assignment's minutes, and no grading server outlives
setup.sh. (Slow: `make test-course`.)"""

import json
import os
import shutil
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

from grading import ROOT
from graders import catalog
from graders.child import sandbox
from graders.course.bundle import build_autograder
from graders.runner import grading
from test_course_autograder import BASE_PYTHON, assert_gradescope_shape

pytestmark = [pytest.mark.course, pytest.mark.skipif(bool(sandbox.available()), reason=sandbox.available() or "")]

IDS = ["ex4", "quiz"]
MINUTES = 2.0
NAMES = [f"{i}: {c.name}" for i in IDS for c in grading.new_result(i).checks]


def processes_under(root: Path) -> list[str]:
    """Command lines of the processes started from `root` (its venv, its source folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if str(root) in line or cwd.startswith(str(root)):
            found.append(f"{entry.name}: {line}")
    return found


@pytest.fixture(scope="module")
def autograder(tmp_path_factory):
    if not BASE_PYTHON.is_file():
        pytest.skip(f"no Python at {BASE_PYTHON} (set GRADERS_TEST_PYTHON)")
    zip_path = build_autograder(tmp_path_factory.mktemp("dist") / "autograder.zip", minutes=MINUTES, ids=IDS,
                                seed_per_submission=True)
    root = tmp_path_factory.mktemp("autograder")
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(root / "source")
    for name in ("setup.sh", "run_autograder"):
        os.chmod(root / "source" / name, 0o755)
    env = dict(os.environ, AUTOGRADER_ROOT=str(root), PYTHON=str(BASE_PYTHON),
               PIP_CACHE_DIR=str(ROOT / ".cache" / "pip"))
    env.pop("VIRTUAL_ENV", None)
    env.pop("GRADERS_SKIP_WARMUP", None)  # the warm-up is what is tested here
    setup = subprocess.run(["bash", str(root / "source" / "setup.sh")], env=env, capture_output=True,
                           text=True, timeout=2400)
    assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
    time.sleep(2)  # anything setup.sh left behind would still be there
    return root, processes_under(root), setup.stdout


def run_autograder(root: Path, fill) -> tuple[dict, float]:
    submission = root / "submission"
    shutil.rmtree(submission, ignore_errors=True)
    shutil.rmtree(root / "results", ignore_errors=True)
    submission.mkdir()
    fill(submission)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env["AUTOGRADER_ROOT"] = str(root)
    start = time.monotonic()
    subprocess.run([str(root / "source" / "run_autograder")], env=env, cwd=root, capture_output=True,
                   timeout=MINUTES * 60 + 120)
    seconds = time.monotonic() - start
    results = json.loads((root / "results" / "results.json").read_text())
    assert_gradescope_shape(results)
    return results, seconds


def reference(sub: Path) -> None:
    for ex_id in IDS:
        shutil.copy(ROOT / "reference" / f"{catalog.module_name(ex_id)}.py", sub)


def wrong_quiz(sub: Path) -> None:
    reference(sub)
    text = (ROOT / "reference" / "quiz.py").read_text()
    for letter in "ABCD":  # every answer moved one letter on: all wrong
        text = text.replace(f'"{letter}",', f'"{letter.lower()}_",')
    for letter, after in zip("abcd", "BCDA"):
        text = text.replace(f'"{letter}_",', f'"{after}",')
    (sub / "quiz.py").write_text(text)


def test_setup_leaves_no_grading_server_running(autograder):
    root, left, said = autograder
    assert "Sandbox isolation on this image:" in said
    assert left == [], left


def test_the_reference_gets_full_marks_on_the_assignments_exercises_only(autograder):
    root, _, _ = autograder
    results, _ = run_autograder(root, reference)
    assert [t["name"] for t in results["tests"]] == NAMES
    assert results["score"] == sum(t["max_score"] for t in results["tests"]) > 0
    assert set(results["extra_data"]["exercises"]) == set(IDS)
    assert {t["visibility"] for t in results["tests"] if t["name"].startswith("quiz")} == {"after_due_date"}
    assert {t["visibility"] for t in results["tests"] if t["name"].startswith("ex4")} == {"visible"}


def test_wrong_quiz_answers_show_no_explanation_before_the_due_date(autograder):
    from importlib.util import module_from_spec, spec_from_file_location

    spec = spec_from_file_location("quiz_checks", catalog.grader_file("quiz"))
    checks = module_from_spec(spec)
    spec.loader.exec_module(checks)
    root, _, _ = autograder
    results, _ = run_autograder(root, wrong_quiz)
    assert results["extra_data"]["exercises"]["quiz"]["score"] == 0
    visible = results["output"] + "".join(t["output"] for t in results["tests"] if t["visibility"] == "visible")
    for explanation in checks.EXPLANATIONS.values():
        assert explanation[:60] not in visible
    assert "is not right" not in visible and "after due date" in results["output"]
    hidden = [t for t in results["tests"] if t["name"].startswith("quiz")]
    assert all(t["visibility"] == "after_due_date" and "is not right" in t["output"] for t in hidden)


def test_each_submission_draws_its_own_seed_from_a_secret_only_root_reads(autograder):
    root, _, _ = autograder
    secret = root / "source" / ".cache" / "submission_secret"
    assert secret.is_file() and secret.stat().st_mode & 0o077 == 0
    first, _ = run_autograder(root, reference)
    again, _ = run_autograder(root, reference)
    other, _ = run_autograder(root, wrong_quiz)
    assert first["extra_data"]["seed"] == again["extra_data"]["seed"] != other["extra_data"]["seed"]
    image_seed = int((root / "source" / ".cache" / "seed").read_text())
    assert image_seed not in (first["extra_data"]["seed"], other["extra_data"]["seed"])


def test_a_submission_that_loops_everywhere_gets_every_test_within_the_minutes(autograder):
    root, _, _ = autograder

    def loops(sub: Path) -> None:
        for ex_id in IDS:
            (sub / f"{catalog.module_name(ex_id)}.py").write_text("while True:\n    pass\n")

    results, seconds = run_autograder(root, loops)
    assert seconds < MINUTES * 60, seconds
    assert [t["name"] for t in results["tests"]] == NAMES and results["score"] == 0
    statuses = {i: ex["status"] for i, ex in results["extra_data"]["exercises"].items()}
    assert set(statuses.values()) <= {"timed out", "not graded"}, statuses
    assert all(t["output"] for t in results["tests"])
