"""`make release`: the students' copy holds no solution and no quiz key, grades exactly like the
full package, and cannot tell a right quiz answer from a wrong one. (Slow: grades the reference.)"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grading import CORPUS, ROOT
from graders import catalog
from graders.course.bundle import STUDENT_README_DROPS, build_release, student_readme

# Slow (they build the release, an autograder venv, a class batch): `make test-course`, run by CI.
pytestmark = pytest.mark.course


def grade_in(package: Path, solutions: Path, *ids: str) -> dict:
    out = solutions.parent / f"results-{solutions.name}.json"
    subprocess.run([sys.executable, "-m", "graders", *ids, "--solutions", str(solutions), "--json", str(out)],
                   cwd=package, capture_output=True, text=True, timeout=900)
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    return build_release(tmp_path_factory.mktemp("dist") / "student")


def test_release_holds_no_solution_no_test_and_no_quiz_key(release):
    files = {p.relative_to(release).as_posix() for p in release.rglob("*") if p.is_file()}
    assert not any(f.startswith(("reference/", "tests/")) for f in files)
    assert "graders/exercises/quiz/key.json" not in files
    reference_answers = (ROOT / "reference" / "quiz.py").read_text()
    assert not any(reference_answers in p.read_text(errors="replace") for p in release.rglob("*.py"))
    assert {f"exercises/{catalog.module_name(i)}.py" for i in catalog.available()} <= files
    for stub in (ROOT / "exercises").glob("*.py"):
        assert (release / "exercises" / stub.name).read_bytes() == stub.read_bytes()
    assert {"Makefile", "pyproject.toml", "README.md"} <= files


def test_student_readme_drops_the_named_sections_and_keeps_the_rest():
    full = (ROOT / "README.md").read_text()
    student = student_readme(full)
    headings = [line[3:].strip() for line in full.splitlines() if line.startswith("## ")]
    for heading in headings:
        assert (f"\n## {heading}\n" in student) == (heading not in STUDENT_README_DROPS), heading
    text = "# T\n\n## Keep\na\n```\n## not a heading\n```\n## For instructors\nsecret\n### sub\nx\n## Also\nb\n"
    assert student_readme(text, ("For instructors",)) == "# T\n\n## Keep\na\n```\n## not a heading\n```\n## Also\nb\n"


def test_release_quiz_gives_right_and_wrong_answers_the_same_result(release, tmp_path):
    runs = {}
    for name, source in (("right", ROOT / "reference" / "quiz.py"), ("all_a", CORPUS / "quiz" / "all_a.py")):
        folder = tmp_path / name
        folder.mkdir()
        shutil.copy(source, folder / "quiz.py")
        runs[name] = grade_in(release, folder, "quiz")
    shape = lambda r: [(t["name"], t["score"], t["status"], t["output"]) for t in r["tests"]]  # noqa: E731
    assert shape(runs["right"]) == shape(runs["all_a"])
    assert runs["right"]["score"] == 0 and all("graded when you submit" in t["output"] for t in runs["right"]["tests"])


def test_release_grades_stubs_as_not_attempted_and_the_reference_in_full(release, tmp_path):
    stubs = grade_in(release, release / "exercises")
    assert {ex["status"] for ex in stubs["extra_data"]["exercises"].values()} == {"not attempted"}
    solutions = tmp_path / "solutions"
    shutil.copytree(ROOT / "reference", solutions)
    graded = grade_in(release, solutions)["extra_data"]["exercises"]
    for ex_id in catalog.available():
        if ex_id != "quiz":
            assert graded[ex_id]["status"] == "passed", (ex_id, graded[ex_id])
