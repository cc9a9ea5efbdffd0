"""Every wrong solution in tests/corpus/<id>/ loses points on the check meant to catch it, with
the words meant to explain it. Each file says which, in its docstring: `loses: <check>: <words>`."""

import pytest

from grading import corpus_cases, expectations, technique_free
from graders import catalog
from graders.runner.points import read_checks

CASES = [(ex_id, case) for ex_id in catalog.available() for case in corpus_cases(ex_id)]


@pytest.mark.parametrize(("ex_id", "case"), CASES, ids=[f"{e}/{c}" for e, c in CASES])
def test_wrong_solution_loses_points_on_intended_check(corpus, ex_id, case):
    expected = expectations(ex_id, case)
    assert expected, f"tests/corpus/{ex_id}/{case}.py declares no 'loses: <check>: <words>' line"
    lost = corpus(ex_id)[case].lost(ex_id, declared=True)
    for check, words in expected:
        assert check in lost, f"{ex_id}/{case}: expected to lose '{check}', lost {sorted(lost)}"
        assert words in lost[check], f"{ex_id}/{case}: message of '{check}' lacks {words!r}: {lost[check]!r}"


@pytest.mark.parametrize("ex_id", catalog.available())
def test_every_check_is_failed_by_some_wrong_solution(ex_id):
    # A check that no wrong solution can fail is not a check.
    named = {check for case in corpus_cases(ex_id) for check, _ in expectations(ex_id, case)}
    unproven = [c.name for c in read_checks(catalog.grader_file(ex_id)) if c.name not in named]
    assert not unproven, f"{ex_id}: no wrong solution in tests/corpus/{ex_id}/ is declared to fail {unproven}"


FREE = [(ex_id, case) for ex_id, case in CASES if technique_free(ex_id, case)]
# Exercises whose lesson is a technique (the quiz and ex4's arithmetic of rounding have none).
TECHNIQUE_EXERCISES = [e for e in catalog.available() if e not in ("ex4", "quiz")]


@pytest.mark.parametrize(("ex_id", "case"), FREE, ids=[f"{e}/{c}" for e, c in FREE])
def test_technique_free_solution_scores_at_most_half(corpus, ex_id, case):
    # The README's rule: every number right without the technique earns at most half.
    ex = corpus(ex_id)[case].exercise(ex_id)
    declared = sum(c.points for c in read_checks(catalog.grader_file(ex_id)))
    assert ex["max_score"] == declared
    assert ex["score"] <= declared / 2, f"{ex_id}/{case} scores {ex['score']}/{declared} without the technique"


@pytest.mark.parametrize("ex_id", TECHNIQUE_EXERCISES)
def test_every_technique_is_tried_without_it(ex_id):
    assert any(e == ex_id for e, _ in FREE), f"tests/corpus/{ex_id}/ has no `technique: none` solution"


def _graded_until_early(ex_id: str) -> str:
    """A wrong solution of ex_id the corpora grade until its declared checks, with checks after them."""
    from grading import graded_whole

    order = [c.name for c in read_checks(catalog.grader_file(ex_id))]
    whole = graded_whole(ex_id)
    return next(case for case in corpus_cases(ex_id) if case not in whole
                and max(order.index(check) for check, _ in expectations(ex_id, case)) < len(order) - 1)


def test_a_solution_graded_until_its_declared_checks_reads_as_graded_whole(tmp_path):
    # The corpora grade most wrong solutions only until the checks they declare are decided
    # (tests/grading.py: graded_whole): the checks run in the grader's order, so those checks say
    # what a whole grading says, and the ones after them are not run.
    import shutil

    from grading import CORPUS, TEST_SEED
    from graders.runner import grading

    ex_id = "ex4"
    case = _graded_until_early(ex_id)
    shutil.copy(CORPUS / ex_id / f"{case}.py", tmp_path / f"{catalog.module_name(ex_id)}.py")
    declared = list(dict.fromkeys(check for check, _ in expectations(ex_id, case)))
    options = grading.Options(seed=TEST_SEED, jobs=1)
    whole = {c.name: c for c in grading.grade_exercise(ex_id, tmp_path, options).checks}
    until = {c.name: c for c in grading.grade_exercise(ex_id, tmp_path, options, until=declared).checks}
    order = list(whole)
    last = max(order.index(check) for check in declared)
    for name in order[:last + 1]:
        assert (until[name].outcome, until[name].message) == (whole[name].outcome, whole[name].message), name
    assert all(until[name].outcome == "not_run" for name in order[last + 1:]), [until[n].outcome for n in order]
    assert any(whole[name].outcome != "not_run" for name in order[last + 1:])


def test_a_run_graded_until_its_declared_checks_refuses_to_say_more(corpus):
    # What a test reads of a wrong solution beyond its declared checks needs a whole grading: a
    # run graded only so far says so rather than answer from checks that did not run.
    run = corpus("ex4")[_graded_until_early("ex4")]
    assert run.until
    run.lost("ex4", declared=True)
    for read in (lambda: run.lost("ex4"), lambda: run.exercise("ex4"), lambda: run.check("ex4", run.until[0])):
        with pytest.raises(AssertionError, match="graded only until"):
            read()
