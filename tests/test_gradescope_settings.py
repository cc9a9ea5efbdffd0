"""The settings an instructor chooses for Gradescope (fast: nothing is graded here): an assignment
as a subset of the exercises, results shown after the due date, a seed per submission, the
whole run's time, and what batch's re-grade check covers. The autograder built with them is run
in tests/test_course_gradescope_settings.py."""

import json
import time
import zipfile

import pytest

from graders import catalog
from graders.app import report
from graders.app.arguments import after_due as parse_after_due
from graders.course import bundle
from graders.course.batch import Student, fingerprint
from graders.runner import grading
from graders.runner.grading import CheckResult, ExerciseResult, Options

QUIZ_CHECKS = [c.name for c in grading.new_result("quiz").checks]
EX4_CHECKS = [c.name for c in grading.new_result("ex4").checks]


def graded(ex_id: str, wrong=(), message=lambda name: f"{name} said so") -> ExerciseResult:
    """An exercise as a grading leaves it: every check passed but those in `wrong`."""
    r = grading.new_result(ex_id)
    for c in r.checks:
        c.outcome = "failed" if c.name in wrong else "passed"
        c.message = message(c.name)
    r.status = grading.status_of(r.checks)
    return r


# ---------------------------------------------------------------- results after the due date

def test_checks_shown_after_the_due_date_carry_gradescopes_visibility():
    results = [graded("ex4"), graded("quiz", wrong={"question_1"})]
    chosen = parse_after_due(["ex4", "quiz"], ["quiz ex4:chapter_case_values"])
    data = report.results_json(results, "text", 1.0, 7, after_due=chosen)
    seen = {t["name"]: t["visibility"] for t in data["tests"]}
    assert {n for n, v in seen.items() if v == "after_due_date"} == (
        {f"quiz: {n}" for n in QUIZ_CHECKS} | {"ex4: chapter_case_values"})
    assert {v for n, v in seen.items() if n not in {f"quiz: {c}" for c in QUIZ_CHECKS} | {"ex4: chapter_case_values"}} == {"visible"}
    assert data["stdout_visibility"] == "hidden"  # the runner's printout holds every message


def test_what_students_see_before_the_due_date_says_nothing_of_a_hidden_quiz():
    """A wrong answer's check explains the right one: nothing of it, nor the quiz's score or
    status, may reach a visible field."""
    explanation = "THE RIGHT ANSWER'S EXPLANATION"
    results = [graded("ex4", wrong={"bf16_result_is_bfloat16"}),
               graded("quiz", wrong={"question_1", "question_2"}, message=lambda name: explanation)]
    results[1].notes.append("a note of the quiz's " + explanation)
    chosen = parse_after_due(["ex4", "quiz"], ["quiz"])
    shown = report.body(report.before_due(results, chosen), verbose=True)
    assert explanation not in shown and "question_" not in shown
    quiz_row = next(line for line in shown.splitlines() if line.startswith("  quiz "))
    assert "after due date" in quiz_row and f"?/{results[1].max_score}" in quiz_row
    assert f"{results[0].score}/{results[0].max_score}" in shown  # the visible exercise as it is
    assert f"and {results[1].max_score} pts of checks whose results are shown after the due date" in shown


def test_a_partly_hidden_exercise_shows_its_other_checks_and_a_status_of_their_own():
    results = [graded("ex4", wrong={"chapter_case_values"}, message=lambda name: f"secret of {name}")]
    shown = report.before_due(results, {("ex4", "chapter_case_values")})[0]
    assert "chapter_case_values" not in [c.name for c in shown.checks]
    assert shown.status == "passed" and shown.score == shown.max_score  # of what is shown
    assert shown.later == next(c.points for c in results[0].checks if c.name == "chapter_case_values")
    assert "secret of chapter_case_values" not in report.body([shown], verbose=True)
    assert results[0].status == "partial"  # the results themselves are untouched


def test_an_exercise_that_could_not_be_graded_still_says_why_before_the_due_date():
    r = grading.not_graded("quiz", "missing: the folder graded holds no quiz.py")
    r.status, r.reason = "missing", "missing: the folder graded holds no quiz.py"
    shown = report.body(report.before_due([r], {("quiz", n) for n in QUIZ_CHECKS}))
    assert "holds no quiz.py" in shown


def test_after_due_names_must_be_exercises_and_checks_of_the_run():
    with pytest.raises(ValueError, match="has no check"):
        parse_after_due(["ex4"], ["ex4:no_such_check"])
    with pytest.raises(ValueError, match="not an exercise graded here"):
        parse_after_due(["ex4"], ["quiz"])
    assert parse_after_due(["ex4", "quiz"], ["quiz,ex4:chapter_case_values"]) == (
        {("quiz", n) for n in QUIZ_CHECKS} | {("ex4", "chapter_case_values")})


# ---------------------------------------------------------------- the assignment's exercises

def test_the_zip_grades_only_the_assignments_exercises(tmp_path):
    out = bundle.build_autograder(tmp_path / "ag.zip", minutes=10, ids=["ex1", "ex2", "quiz"],
                                  after_due=["quiz", "ex7:whatever"], seed_per_submission=True)
    with zipfile.ZipFile(out) as zf:
        run, setup = zf.read("run_autograder").decode(), zf.read("setup.sh").decode()
    assert "@" not in run.replace("$RUNNER_ARGS[@]", "").replace('"${SEED_ARGS[@]}"', "").replace(
        '"${RUNNER_ARGS[@]}"', "")
    runner_args = next(line for line in run.splitlines() if line.startswith("RUNNER_ARGS="))
    # ex7 is not in the assignment: its check is left out rather than refused by the runner
    assert runner_args == (f"RUNNER_ARGS=(ex1 ex2 quiz --jobs 1 --budget {bundle.grading_budget(10)} --sandbox "
                           "--after-due quiz)")
    assert "IDS=(ex1 ex2 quiz)" in setup and '"${IDS[@]}" --solutions reference' in setup
    assert "SEED_PER_SUBMISSION=1" in run and "SEED_PER_SUBMISSION=1" in setup


def test_make_autograders_options_are_checked_when_the_zip_is_made(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bundle.main(["autograder", "--out", str(tmp_path / "a.zip"), "--ex", "ex1 ex99"])
    with pytest.raises(SystemExit):
        bundle.main(["autograder", "--out", str(tmp_path / "a.zip"), "--ex", "ex1", "--after-due", "quiz"])
    with pytest.raises(SystemExit):  # 21 s of grading cannot hold three exercises of 20 s each
        bundle.main(["autograder", "--out", str(tmp_path / "a.zip"), "--ex", "ex1 ex4 quiz", "--minutes", "1.35"])
    capsys.readouterr()
    # By default the quiz is shown after the due date, when the assignment has it
    assert bundle.main(["autograder", "--out", str(tmp_path / "b.zip"), "--ex", "ex1 ex4"]) == 0
    assert "results after the due date: none" in capsys.readouterr().out
    assert bundle.main(["autograder", "--out", str(tmp_path / "c.zip"), "--ex", "ex4,quiz"]) == 0
    assert "results after the due date: quiz" in capsys.readouterr().out
    assert bundle.main(["autograder", "--out", str(tmp_path / "d.zip"), "--ex", "quiz", "--after-due", "none"]) == 0
    assert "results after the due date: none" in capsys.readouterr().out


# ---------------------------------------------------------------- a seed per submission

def test_a_submissions_seed_follows_its_modules_and_the_secret(tmp_path):
    ex4 = tmp_path / f"{catalog.module_name('ex4')}.py"
    ex4.write_text("x = 1\n")
    (tmp_path / "notes.txt").write_text("not a module")
    ids = ["ex4", "quiz"]
    first = bundle.submission_seed(tmp_path, ids, b"secret")
    assert 0 <= first < 1_000_000 and bundle.submission_seed(tmp_path, ids, b"secret") == first
    (tmp_path / "notes.txt").write_text("changed, still not a module")
    assert bundle.submission_seed(tmp_path, ids, b"secret") == first
    assert bundle.submission_seed(tmp_path, ids, b"another secret") != first
    ex4.write_text("x = 2\n")
    assert bundle.submission_seed(tmp_path, ids, b"secret") != first


def test_the_submissions_secret_is_one_the_sandbox_hides():
    assert catalog.submission_secret_file() in catalog.secrets()


# ---------------------------------------------------------------- the whole run's time

class NoLauncher:
    def run(self, *args, **kwargs):
        raise AssertionError("an exercise past the run's deadline must not be started")


def test_an_exercise_the_run_has_no_time_left_for_is_not_graded_and_lists_each_check(tmp_path):
    (tmp_path / f"{catalog.module_name('ex4')}.py").write_text("x = 1\n")
    options = Options(timeout=60, deadline=time.monotonic() + 1)
    result = grading.grade_exercise("ex4", tmp_path, options, launcher=NoLauncher())
    assert result.status == "not graded" and result.score == 0
    assert [c.name for c in result.checks] == EX4_CHECKS
    assert all(c.message.startswith("not graded: the run's time ran out") for c in result.checks)
    assert grading.not_graded("quiz", grading.OUT_OF_TIME).reason == grading.OUT_OF_TIME
    data = report.results_json([result], "", 0.0, 1)
    assert [t["name"] for t in data["tests"]] == [f"ex4: {n}" for n in EX4_CHECKS]
    assert {t["output"] for t in data["tests"]} == {result.reason}


def test_an_exercises_limit_is_cut_to_what_is_left_of_the_run():
    options = Options(timeout=60, limits={"ex4": 30}, deadline=time.monotonic() + 20)
    assert 15 < options.limit("ex4") <= 20 - grading.STOP_RESERVE and options.cut_short("ex4")
    assert Options(timeout=60, limits={"ex4": 30}).limit("ex4") == 30


# ---------------------------------------------------------------- batch

def test_batch_regrades_on_any_file_of_the_graders_the_exercises_graded_or_the_seed(tmp_path, monkeypatch):
    import shutil

    (tmp_path / "ada").mkdir()
    (tmp_path / "ada" / f"{catalog.module_name('ex1')}.py").write_text("a = 1\n")
    ada = Student("ada", tmp_path / "ada")
    copy = tmp_path / "graders"
    shutil.copytree(catalog.GRADERS_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(catalog, "GRADERS_DIR", copy)
    first = fingerprint(ada, 60, ["ex1"], 5)
    assert fingerprint(ada, 60, ["ex1"], 5) == first
    assert fingerprint(ada, 60, ["ex1"], 6) != first
    assert fingerprint(ada, 60, ["ex1", "quiz"], 5) != first
    # a probe, a helper, and data of any kind that a grading reads
    for path in (copy / "exercises" / catalog.module_name("ex1") / "probes.py", copy / "kit" / "numeric.py",
                 copy / "exercises" / catalog.module_name("ex1") / "table.npz"):
        path.write_bytes((path.read_bytes() if path.exists() else b"") + b"\n# changed\n")
        changed = fingerprint(ada, 60, ["ex1"], 5)
        assert changed != first, path.name
        first = changed
    # bytecode follows its source
    (copy / "kit" / "__pycache__").mkdir(exist_ok=True)
    (copy / "kit" / "__pycache__" / "numeric.cpython-313.pyc").write_bytes(b"whatever")
    assert fingerprint(ada, 60, ["ex1"], 5) == first


def test_batch_grades_only_the_exercises_asked_for(tmp_path, monkeypatch):
    from graders.course import batch

    seen = {}

    def run(command, **kwargs):
        seen["command"] = command
        raise batch.subprocess.TimeoutExpired(command, 0)

    monkeypatch.setattr(batch.subprocess, "run", run)
    (tmp_path / "ada").mkdir()
    batch.grade_student(Student("ada", tmp_path / "ada"), tmp_path / "out", 60, ["ex2", "quiz"], 31)
    assert seen["command"][3:5] == ["ex2", "quiz"] and seen["command"][seen["command"].index("--seed") + 1] == "31"
    rows = {"ada": {"score": 3, "extra_data": {"exercises": {"ex2": {"score": 2}, "quiz": {"score": 1}}}}}
    lines = batch.write_gradebook(tmp_path, rows, ["ex2", "quiz"]).read_text().splitlines()
    assert lines == ["student,ex2,quiz,total,notes", "ada,2,1,3,"]
    with pytest.raises(SystemExit):
        batch.parse_args([str(tmp_path), "--out", str(tmp_path / "o"), "--ex", "ex99"])
    assert batch.parse_args([str(tmp_path), "--out", str(tmp_path / "o"), "--ex", "quiz", "ex2"]).ex == ["ex2", "quiz"]


def test_gradebook_notes_name_exercises_the_run_did_not_reach():
    from graders.course.batch import _notes

    results = json.loads(json.dumps(report.results_json([grading.not_graded("ex4", grading.OUT_OF_TIME)], "", 0, 1)))
    assert _notes(results) == "ex4 not graded (out of time)"


def test_the_fallback_results_list_every_test_of_the_assignment(tmp_path):
    """Written before the runner starts: a submission whose grading cannot run still has the
    same test names as every other one."""
    out = bundle.build_autograder(tmp_path / "ag.zip", ids=["ex4", "quiz"])
    with zipfile.ZipFile(out) as zf:
        run = zf.read("run_autograder").decode()
    text = run[run.index("<<'JSON'\n") + 8:run.index("\nJSON\n")]
    data = json.loads(text)
    assert [t["name"] for t in data["tests"]] == [f"ex4: {n}" for n in EX4_CHECKS] + [f"quiz: {n}" for n in QUIZ_CHECKS]
    assert data["score"] == 0 and {t["score"] for t in data["tests"]} == {0}


def test_a_hidden_quiz_left_as_the_stub_still_reads_not_attempted():
    r = grading.new_result("quiz")
    for c in r.checks:
        c.outcome, c.message = "not_attempted", f"ANSWERS[{c.name}] is still None"
    r.status = grading.status_of(r.checks)
    shown = report.before_due([r], {("quiz", n) for n in QUIZ_CHECKS})
    assert shown[0].status == "not attempted" and "quiz.py" in report.body(shown)
