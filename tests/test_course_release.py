"""`make release`: the students' copy holds no solution, no quiz key and no quiz explanation: its
public checks answer the graders' own expected values from the values recorded when it was made,
grade the reference in full and the stubs as not attempted, and cannot tell a right quiz answer
from a wrong one. (Slow: making the copy grades the reference once, and these tests grade it again
in the copy.)"""

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grading import CORPUS, ROOT, grader_module
from graders import catalog
from graders.course.bundle import PUBLIC_SEED, STUDENT_README_DROPS, build_release, student_readme

# Slow (they build the release, an autograder venv, a class batch): `make test-course`, run by CI.
pytestmark = pytest.mark.course


def grade_in(package: Path, solutions: Path, *ids: str, run: list | None = None) -> dict:
    """results.json of grading `solutions` in `package`; `run` (a list) gets the finished process."""
    out = solutions.parent / f"results-{solutions.name}.json"
    done = subprocess.run([sys.executable, "-m", "graders", *ids, "--solutions", str(solutions), "--json", str(out)],
                          cwd=package, capture_output=True, text=True, timeout=900)
    if run is not None:
        run.append(done)
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    return build_release(tmp_path_factory.mktemp("dist") / "student")


@pytest.fixture(scope="module")
def self_study(tmp_path_factory) -> Path:
    return build_release(tmp_path_factory.mktemp("dist") / "self-study", self_study=True)


# ---- what a copy gives away -------------------------------------------------------------------

SHORTEST = 30  # characters of a normalised line: shorter ones (`return x`, `def f(a, b):`) say nothing


def _normal(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _body_lines(path: Path) -> list[tuple[str, str]]:
    """(function, normalised line) for every line of every function body of a reference module
    (methods and nested functions too; docstrings and comments left out)."""
    text = path.read_text()
    lines = text.splitlines()
    found = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]
        if body:
            for line in lines[body[0].lineno - 1:node.end_lineno]:
                code = line.split("#")[0] if not line.lstrip().startswith("#") else ""
                found.append((node.name, _normal(code)))
    return found


def _strings_and_text(copy: Path) -> list[str]:
    """Everything a copy holds as text: each file normalised, and each Python string constant
    (an explanation written over several source lines is one constant) normalised too."""
    out = []
    for path in sorted(copy.rglob("*")):
        if not path.is_file() or ".venv" in path.parts or ".cache" in path.parts:
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        out.append(_normal(text))
        if path.suffix == ".py":
            out += [_normal(n.value) for n in ast.walk(ast.parse(text))
                    if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return out


def reference_lines_in(copy: Path) -> list[str]:
    """The reference's body lines (SHORTEST characters or more, not in the stub) found in `copy`."""
    texts = _strings_and_text(copy)
    found = []
    for ref in sorted((ROOT / "reference").glob("*.py")):
        stub = _normal((ROOT / "exercises" / ref.name).read_text())
        for function, line in _body_lines(ref):
            if len(line) >= SHORTEST and line not in stub and any(line in t for t in texts):
                found.append(f"{ref.name}: {function}: {line}")
    return found


def explanation_sentences() -> list[str]:
    """Every sentence (SHORTEST characters or more) of every quiz explanation, normalised."""
    explanations = grader_module("quiz").EXPLANATIONS
    return [_normal(s) for text in explanations.values() for s in re.split(r"(?<=[.:;])\s+", text)
            if len(_normal(s)) >= SHORTEST]


def explanations_in(texts: list[str]) -> list[str]:
    return [s for s in explanation_sentences() if any(s in t for t in texts)]


def test_the_scan_finds_what_a_self_study_copy_gives_away(self_study):
    """The scans below can fail: the full checks hold lines of the reference and every explanation."""
    assert reference_lines_in(self_study)
    assert len(explanations_in(_strings_and_text(self_study))) == len(explanation_sentences()) > 14


def test_course_copy_holds_no_reference_line_and_no_quiz_explanation(release):
    assert reference_lines_in(release) == []
    assert explanations_in(_strings_and_text(release)) == []


def test_course_copy_holds_public_data_and_no_expected_body(release):
    """Each exercise with marked computations has its recorded values; no marked body is left."""
    from graders.course.bundle import strip_expected
    from graders.kit.expected import BODY

    for ex_id in catalog.available():
        folder = release / "graders" / catalog.exercise_dir(ex_id).relative_to(catalog.GRADERS_DIR)
        marked = []
        for path in folder.glob("*.py"):
            text = path.read_text()
            stripped, names = strip_expected(text, str(path))
            assert stripped == text, path  # every marked body is the one line already
            marked += names
            assert text.count(BODY) == len(names), path
        assert (folder / "public.wire").is_file() == bool(marked), ex_id
    assert (release / "graders" / "public_seed").read_text().strip() == str(PUBLIC_SEED)


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
    shape = lambda r: [(t["name"], t["score"], t.get("status"), t["output"]) for t in r["tests"]]  # noqa: E731
    assert shape(runs["right"]) == shape(runs["all_a"])
    assert runs["right"]["score"] == 0 and all("graded when you submit" in t["output"] for t in runs["right"]["tests"])
    # neither passed nor failed: a fully answered quiz does not fail `make grade`
    assert all("status" not in t for t in runs["right"]["tests"])
    assert runs["right"]["extra_data"]["exercises"]["quiz"]["status"] == "on submission"
    for run in runs.values():  # no report of the copy explains an answer
        assert explanations_in([_normal(run["output"]), *(_normal(t["output"]) for t in run["tests"])]) == []


def test_release_grades_stubs_as_not_attempted_and_the_reference_in_full(release, tmp_path):
    stubs = grade_in(release, release / "exercises")
    assert {ex["status"] for ex in stubs["extra_data"]["exercises"].values()} == {"not attempted"}
    assert stubs["extra_data"]["seed"] == PUBLIC_SEED
    solutions = tmp_path / "solutions"
    shutil.copytree(ROOT / "reference", solutions)
    run = []
    results = grade_in(release, solutions, run=run)
    graded = results["extra_data"]["exercises"]
    for ex_id in catalog.available():
        if ex_id != "quiz":
            # every public check graded (none deferred) and passed: full marks of the full package's
            assert graded[ex_id]["status"] == "passed", (ex_id, graded[ex_id])
            assert {c["outcome"] for c in graded[ex_id]["checks"].values()} == {"passed"}, ex_id
            assert graded[ex_id]["max_score"] == sum(c["points"] for c in graded[ex_id]["checks"].values())
    assert graded["quiz"]["status"] == "on submission"
    assert run[0].returncode == 0, run[0].stdout[-2000:]  # a fully answered quiz fails nothing
    assert f"public seed {PUBLIC_SEED}" in run[0].stdout
    assert explanations_in([_normal(run[0].stdout), _normal(results["output"])]) == []


def test_another_seed_in_the_copy_is_graded_when_submitted(release, tmp_path):
    """Off the public seed, a check whose expected values were not recorded says so, and counts
    neither way: it does not pretend."""
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    module = catalog.module_name("ex4") + ".py"
    shutil.copy(ROOT / "reference" / module, solutions / module)
    out = tmp_path / "other-seed.json"
    subprocess.run([sys.executable, "-m", "graders", "ex4", "--solutions", str(solutions), "--seed",
                    str(PUBLIC_SEED + 1), "--json", str(out)], cwd=release, capture_output=True, text=True, timeout=900)
    checks = json.loads(out.read_text())["extra_data"]["exercises"]["ex4"]["checks"]
    deferred = {name for name, c in checks.items() if c["outcome"] == "deferred"}
    assert deferred and all("graded when you submit" in checks[n]["message"] for n in deferred)
    assert all(c["outcome"] in ("passed", "deferred") for c in checks.values())
