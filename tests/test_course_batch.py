"""`python -m graders.course.batch`: a class of five (the reference, the stubs, one that loops in ex1, an
empty folder, the reference as a zip) gives one gradebook row each, whatever their code does;
a second run skips everyone unchanged. (Slow: grades the reference twice.)"""

import csv
import io
import json
import shutil
import subprocess
import sys
import time
import zipfile

import pytest

from grading import ROOT
from graders import catalog

# Slow (they build the release, an autograder venv, a class batch): `make test-course`, run by CI.
pytestmark = pytest.mark.course

TIMEOUT = 60  # per exercise: well above the reference's slowest exercise, so only the loop hits it


def run_batch(submissions, out, *extra):
    return subprocess.run([sys.executable, "-m", "graders.course.batch", str(submissions), "--out", str(out),
                           "--jobs", "2", "--timeout", str(TIMEOUT), *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("class")
    subs = root / "submissions"
    shutil.copytree(ROOT / "reference", subs / "ada")
    shutil.copytree(ROOT / "exercises", subs / "bob")
    (subs / "cy").mkdir()
    (subs / "cy" / f"{catalog.module_name('ex1')}.py").write_text("while True:\n    pass\n")
    shutil.copy(ROOT / "reference" / "quiz.py", subs / "cy" / "quiz.py")
    (subs / "dee").mkdir()
    with zipfile.ZipFile(subs / "eve.zip", "w") as zf:  # zipped with its folder, as students often do
        for path in (ROOT / "reference").glob("*.py"):
            zf.write(path, f"homework/{path.name}")
    start = time.monotonic()
    first = run_batch(subs, root / "out")
    return root, first, time.monotonic() - start


def gradebook(out) -> list[dict]:
    return list(csv.DictReader(io.StringIO((out / "gradebook.csv").read_text())))


def test_every_student_gets_a_row_whatever_their_code_did(batch):
    root, first, _ = batch
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == str(root / "out" / "gradebook.csv")  # nothing else on stdout
    rows = {r["student"]: r for r in gradebook(root / "out")}
    ids = catalog.available()
    assert list(rows) == ["ada", "bob", "cy", "dee", "eve"]
    assert list(rows["ada"]) == ["student", *ids, "total", "notes"]
    results = json.loads((root / "out" / "ada" / "results.json").read_text())
    tests = results["tests"]
    full = sum(t["max_score"] for t in tests)
    # What to look at if the reference loses points: the class's seed is drawn per installation.
    lost = {"seed": results["extra_data"]["seed"], **{t["name"]: t["output"] for t in tests if t["score"] < t["max_score"]}}
    assert int(rows["ada"]["total"]) == int(rows["eve"]["total"]) == full and rows["ada"]["notes"] == "", lost
    assert int(rows["bob"]["total"]) == 0 and rows["bob"]["notes"] == ""
    assert "ex1 timed out" in rows["cy"]["notes"] and "ex2 missing module" in rows["cy"]["notes"]
    assert int(rows["cy"]["quiz"]) == int(rows["ada"]["quiz"]) > 0
    assert int(rows["dee"]["total"]) == 0
    assert all(f"{i} missing module" in rows["dee"]["notes"] for i in ids)
    for student in rows:
        assert (root / "out" / student / "report.txt").read_text().strip()
        assert json.loads((root / "out" / student / "results.json").read_text())["tests"]


def test_progress_goes_to_stderr_one_line_per_student(batch):
    _, first, _ = batch
    lines = [line for line in first.stderr.splitlines() if line.startswith("[")]
    assert [line.split("]")[0] for line in lines] == [f"[{i}/5" for i in range(1, 6)]
    assert "left" in lines[0] and "\r" not in first.stderr


def test_a_second_run_skips_unchanged_students_and_changes_nothing(batch):
    root, _, first_seconds = batch
    out = root / "out"
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    start = time.monotonic()
    again = run_batch(root / "submissions", out)
    seconds = time.monotonic() - start
    assert again.returncode == 0 and again.stderr.count("unchanged, kept") == 5, again.stderr
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert seconds < first_seconds / 5, (seconds, first_seconds)


def test_a_changed_submission_is_graded_again(batch, tmp_path):
    root, _, _ = batch
    out = tmp_path / "out"
    shutil.copytree(root / "out", out)
    subs = tmp_path / "subs"
    shutil.copytree(root / "submissions", subs)
    (subs / "dee" / "quiz.py").write_text((ROOT / "reference" / "quiz.py").read_text())
    again = run_batch(subs, out)
    assert again.stderr.count("unchanged, kept") == 4, again.stderr
    rows = {r["student"]: r for r in gradebook(out)}
    assert int(rows["dee"]["quiz"]) == int(rows["ada"]["quiz"])
