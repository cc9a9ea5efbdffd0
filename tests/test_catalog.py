"""Everything agrees with graders/catalog.py, where each exercise is described once: its stub,
its reference, its grader, its wrong-solution corpus and its proof, the README's table, and
whether its grading process needs JAX."""

import ast
import re

import pytest

from grading import CORPUS, ROOT
from graders import catalog
from graders.runner.points import read_checks

IDS = list(catalog.EXERCISES)


def _imports(path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("ex_id", IDS)
def test_every_exercise_has_stub_reference_grader_and_corpus(ex_id):
    module = catalog.module_name(ex_id)
    for path in (ROOT / "exercises" / f"{module}.py", ROOT / "reference" / f"{module}.py", catalog.grader_file(ex_id)):
        assert path.is_file(), f"{ex_id}: {path.relative_to(ROOT)} is missing"
    assert any((CORPUS / ex_id).glob("*.py")), f"{ex_id}: tests/corpus/{ex_id}/ holds no wrong solution"


def test_no_module_outside_the_catalog():
    known = {f"{e.module}.py" for e in catalog.EXERCISES.values()}
    for folder in ("exercises", "reference"):
        extra = {p.name for p in (ROOT / folder).glob("*.py")} - known
        assert not extra, f"{folder}/ holds modules the catalog does not know: {sorted(extra)}"
    folders = {p.name for p in catalog.EXERCISES_DIR.iterdir() if p.is_dir() and p.name != "__pycache__"}
    extra = folders - {e.module for e in catalog.EXERCISES.values()}
    assert not extra, f"graders/exercises/ holds folders for no exercise: {sorted(extra)}"
    corpus = {p.name for p in CORPUS.iterdir() if p.is_dir()} - set(IDS)
    assert not corpus, f"tests/corpus/ has folders for no exercise: {sorted(corpus)}"


@pytest.mark.parametrize("ex_id", IDS)
def test_libraries_are_those_the_grader_and_the_solution_import(ex_id):
    # The fork server imports what the catalog lists; a library missing there is imported again
    # in every child, one listed but unused slows every run.
    declared = {lib.split(".")[0] for lib in catalog.EXERCISES[ex_id].libraries}
    module = catalog.module_name(ex_id)
    used = (_imports(catalog.grader_file(ex_id)) | _imports(ROOT / "reference" / f"{module}.py")
            | (_imports(catalog.probes_file(ex_id)) if catalog.has_probes(ex_id) else set()))
    assert declared == used & {"jax", "flax", "optax", "orbax", "ml_dtypes"}, (declared, used)


@pytest.mark.parametrize("ex_id", IDS)
def test_checks_reach_the_learner_only_through_probes(ex_id):
    # Under --sandbox the checks run in a judge that never imports the learner's module, and the
    # worker that does cannot read the checks. The quiz's answers are data (Exercise.data).
    if catalog.EXERCISES[ex_id].data:
        assert not catalog.has_probes(ex_id)
        return
    assert catalog.has_probes(ex_id), f"{ex_id} has no graders/exercises/{catalog.module_name(ex_id)}.py"
    tree = ast.parse(catalog.grader_file(ex_id).read_text())
    names = ({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
             | {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)})
    assert "sol" not in names, f"{catalog.grader_file(ex_id).name} still takes the learner's module"
    probes = ast.parse(catalog.probes_file(ex_id).read_text())
    imported = {getattr(n, "module", None) or "" for n in ast.walk(probes) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(probes) if isinstance(n, ast.Import) for a in n.names}
    assert not any("test_" in name for name in imported), "a probe imports checks the worker cannot read"


def _readme_rows() -> dict[str, list[str]]:
    rows = {}
    for line in (ROOT / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells and cells[0] in catalog.EXERCISES:
            rows.setdefault(cells[0], cells)
    return rows


@pytest.mark.parametrize("ex_id", IDS)
def test_readme_table_names_the_module_and_its_points(ex_id):
    rows = _readme_rows()
    assert ex_id in rows, f"README's exercise table has no row for {ex_id}"
    cells = rows[ex_id]
    assert cells[1] == f"`{catalog.module_name(ex_id)}.py`", cells
    points = sum(c.points for c in read_checks(catalog.grader_file(ex_id)))
    assert cells[2] == str(points), f"{ex_id}: the README says {cells[2]} points, the grader declares {points}"


def test_readme_total_is_the_sum_of_the_exercises():
    text = (ROOT / "README.md").read_text()
    total = sum(c.points for e in IDS for c in read_checks(catalog.grader_file(e)))
    found = re.search(r"\*\*(\d+) points\*\* in all", text)
    assert found and int(found.group(1)) == total, f"README should say **{total} points** in all"


@pytest.mark.parametrize("ex_id", [e for e in IDS if catalog.needs_jax(e)])
def test_the_bench_edit_puts_a_times_one_into_the_reference_once_per_anchor(ex_id):
    # make bench's edit loop grades the reference with this edit: an anchor that no longer
    # occurs (the reference was rewritten) would leave the learner's programs cached, and the
    # edit loop would measure a warm run.
    edit = catalog.EXERCISES[ex_id].edit
    assert edit, f"{ex_id} has no bench edit: its edit loop would change no program"
    text = (ROOT / "reference" / f"{catalog.module_name(ex_id)}.py").read_text()
    for old, new in edit:
        assert text.count(old) == 1, f"{ex_id}: {old!r} occurs {text.count(old)} times in the reference"
        assert new.count(" * 1.0") == 1 and new.replace(" * 1.0", "") == old, (old, new)
    for times in (1, 3):
        changed = catalog.edited(ex_id, text, times)
        ast.parse(changed)
        assert changed.count(" * 1.0") - text.count(" * 1.0") == times * len(edit)


def test_the_learners_readme_is_short_and_names_no_file_their_copy_lacks():
    # The students' copy (make release) has no tests/ or reference/: its README must not send a
    # learner there, and the learner's part stays short enough to read first.
    from graders.course.bundle import student_readme

    student = student_readme((ROOT / "README.md").read_text())
    assert len(student.splitlines()) <= 250, len(student.splitlines())
    for missing in ("tests/", "reference/"):
        assert missing not in student, f"the students' README names {missing}, which their copy lacks"


def test_the_instructors_part_is_short():
    text = (ROOT / "README.md").read_text()
    part = text[text.index("## For instructors"):text.index("## For maintainers")]
    assert len(part.splitlines()) <= 120, len(part.splitlines())


def _steps_to_add_an_exercise() -> list[str]:
    text = (ROOT / "graders" / "README.md").read_text()
    section = text[text.index("## How to add an exercise"):]
    section = section[:section.index("\n## ", 1)]
    steps = re.findall(r"^\d+\. (.*(?:\n   .*)*)", section, re.M)
    assert len(steps) >= 5, "graders/README.md's 'How to add an exercise' should be a numbered list"
    return steps


@pytest.mark.parametrize("ex_id", IDS)
def test_every_file_the_steps_to_add_an_exercise_name_exists(ex_id):
    # graders/README.md's numbered list names each file an exercise needs; every exercise has it.
    named = [p for step in _steps_to_add_an_exercise() for p in re.findall(r"`([^`]*<(?:module|id)>[^`]*)`", step)]
    assert named, "the steps name no file"
    module = catalog.module_name(ex_id)
    for pattern in named:
        if pattern.endswith("probes.py") and not catalog.has_probes(ex_id):
            continue  # probes only where the checks need the learner's code (the quiz's are data)
        path = ROOT / pattern.replace("<module>", module).replace("<id>", ex_id)
        assert path.exists(), f"{ex_id}: {path.relative_to(ROOT)} (graders/README.md, How to add an exercise)"
    for path in (catalog.grader_file(ex_id), catalog.exercise_dir(ex_id) / "__init__.py"):
        assert path.is_file(), path
