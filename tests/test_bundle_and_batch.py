"""Fast checks of the course tools' pieces (no grading): where a submission's modules are found,
what a student's zip may hold, when a student counts as unchanged, how notes are written, and
which caches an unconfined student's run is given."""

import shutil
import subprocess
import zipfile

import pytest

from graders import catalog
from graders.course import batch
from graders.course.batch import Student, _notes, fingerprint, private_caches, unzip
from graders.course.bundle import find_solutions, grading_budget
from graders.runner.grading import budget_limits

EX1 = f"{catalog.module_name('ex1')}.py"
QUIZ = "quiz.py"


def test_modules_are_found_at_the_top_or_in_a_folder(tmp_path):
    (tmp_path / "top").mkdir()
    (tmp_path / "top" / EX1).write_text("")
    assert find_solutions(tmp_path / "top") == tmp_path / "top"
    nested = tmp_path / "zipped" / "hw" / "src"
    nested.mkdir(parents=True)
    (nested / EX1).write_text("")
    (nested / QUIZ).write_text("")
    (tmp_path / "zipped" / "hw" / QUIZ).write_text("")  # a stray copy holds fewer modules
    (tmp_path / "zipped" / "__MACOSX").mkdir()
    (tmp_path / "zipped" / "__MACOSX" / EX1).write_text("")
    assert find_solutions(tmp_path / "zipped") == nested
    (tmp_path / "empty").mkdir()
    assert find_solutions(tmp_path / "empty") is None


def test_a_whole_working_folder_is_graded_from_exercises_never_from_the_package(tmp_path):
    """A student zips their whole folder, with two stubs deleted: exercises/ holds 7 modules,
    reference/ (and a stray copy under tests/, dist/ or .venv/) all 9; exercises/ is graded."""
    import shutil

    from grading import ROOT

    whole = tmp_path / "whole" / "my-folder"
    shutil.copytree(ROOT / "exercises", whole / "exercises")
    for ex in ("ex3", "ex5"):
        (whole / "exercises" / f"{catalog.module_name(ex)}.py").unlink()
    for package_folder in ("reference", "tests/right/all", "dist/student/exercises", ".venv/lib", "graders/exercises"):
        shutil.copytree(ROOT / "reference", whole / package_folder)
    assert find_solutions(tmp_path / "whole") == whole / "exercises"
    # without an exercises/ folder, the folder holding most modules, outside the package's own
    (whole / "exercises").rename(whole / "mine")
    assert find_solutions(tmp_path / "whole") == whole / "mine"


def test_a_zip_that_escapes_its_folder_is_refused(tmp_path):
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("../outside.py", "x = 1\n")
    with pytest.raises(ValueError, match="outside its folder"):
        unzip(archive, tmp_path / "into")
    assert not (tmp_path / "outside.py").exists()


def test_a_student_is_unchanged_only_with_the_same_bytes_and_limits(tmp_path):
    (tmp_path / "ada").mkdir()
    (tmp_path / "ada" / EX1).write_text("a = 1\n")
    ada = Student("ada", tmp_path / "ada")
    first = fingerprint(ada, 60)
    assert fingerprint(ada, 60) == first and fingerprint(ada, 90) != first
    (tmp_path / "ada" / EX1).write_text("a = 2\n")
    assert fingerprint(ada, 60) != first


def test_a_change_to_any_checks_or_probes_file_regrades(tmp_path, monkeypatch):
    (tmp_path / "ada").mkdir()
    (tmp_path / "ada" / EX1).write_text("a = 1\n")
    ada = Student("ada", tmp_path / "ada")
    copy = tmp_path / "graders"
    shutil.copytree(catalog.GRADERS_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(catalog, "GRADERS_DIR", copy)
    first = fingerprint(ada, 60)
    for part in ("probes.py", "checks.py"):
        path = copy / "exercises" / catalog.module_name("ex1") / part
        path.write_text(path.read_text() + "\n# changed\n")
        changed = fingerprint(ada, 60)
        assert changed != first, part
        first = changed


def test_gradebook_notes_name_timeouts_missing_modules_and_errors():
    results = {"extra_data": {"exercises": {
        "ex1": {"status": "timed out", "reason": "stopped after the 60 s limit"},
        "ex2": {"status": "error", "reason": "missing: there is no ex2_sqrt_checkpointing.py in x/"},
        "ex3": {"status": "error", "reason": "could not import ex3_fsdp_shard_map.py: SyntaxError"},
        "ex4": {"status": "passed", "reason": ""}}}}
    assert _notes(results) == "ex1 timed out; ex2 missing module; ex3 error"


def test_ten_minutes_leave_every_exercise_its_share_and_a_margin():
    limits = budget_limits(catalog.available(), grading_budget(10))
    assert sum(limits.values()) <= 10 * 60 - 60 + 1e-6
    assert min(limits.values()) >= 20 and max(limits, key=limits.get) == max(
        catalog.available(), key=lambda i: catalog.EXERCISES[i].cost)
    assert grading_budget(20) > 2 * grading_budget(10)


def test_an_unconfined_student_gets_copies_of_the_caches_that_nothing_written_there_leaves(tmp_path, monkeypatch):
    for name in ("jax", "expected"):
        (tmp_path / "package" / name).mkdir(parents=True)
        (tmp_path / "package" / name / "entry").write_text("as the reference left it")
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "package" / "jax"))
    monkeypatch.setenv("GRADERS_EXPECTED_DIR", str(tmp_path / "package" / "expected"))
    env = private_caches(tmp_path / "student")
    for name, folder in (("jax", env["JAX_COMPILATION_CACHE_DIR"]), ("expected", env["GRADERS_EXPECTED_DIR"])):
        copied = tmp_path / "student" / folder.rsplit("/", 1)[1] / "entry"
        assert str(copied.parent) == folder and copied.read_text() == "as the reference left it"
        with open(copied, "w") as f:  # written in place, as a student's code could
            f.write("forged")
        (copied.parent / "planted").write_text("forged")
        assert (tmp_path / "package" / name / "entry").read_text() == "as the reference left it"
        assert not (tmp_path / "package" / name / "planted").exists()


@pytest.mark.parametrize("confined", [True, False])
def test_grade_student_gives_private_caches_exactly_when_unconfined(tmp_path, monkeypatch, confined):
    monkeypatch.setattr(batch, "SANDBOX", ("--sandbox",) if confined else ())
    monkeypatch.setenv("GRADERS_EXPECTED_DIR", str(tmp_path / "package-expected"))
    seen = {}

    def run(command, **kwargs):  # the grading command, not run: what it would be given
        seen.update(command=command, env=kwargs["env"])
        raise subprocess.TimeoutExpired(command, 0)

    monkeypatch.setattr(batch.subprocess, "run", run)
    (tmp_path / "ada").mkdir()
    (tmp_path / "ada" / EX1).write_text("")
    batch.grade_student(Student("ada", tmp_path / "ada"), tmp_path / "out", 60)
    assert ("--sandbox" in seen["command"]) == confined
    assert (seen["env"]["GRADERS_EXPECTED_DIR"] == str(tmp_path / "package-expected")) == confined
