"""Every wrong solution in tests/corpus/<id>/ loses points on the check meant to catch it, with
the words meant to explain it. Each file says which, in its docstring: `loses: <check>: <words>`.
`make test` grades each for the checks it declares only; `make test-course` grades each whole."""

import pytest

from grading import corpus_cases, expectations, technique_free, technique_free_params
from graders import catalog
from graders.runner.points import read_checks

CASES = [(ex_id, case) for ex_id in catalog.available() for case in corpus_cases(ex_id)]


def _loses_as_declared(corpus, ex_id: str, case: str) -> None:
    expected = expectations(ex_id, case)
    assert expected, f"tests/corpus/{ex_id}/{case}.py declares no 'loses: <check>: <words>' line"
    lost = corpus(ex_id)[case].lost(ex_id, declared=True)
    for check, words in expected:
        assert check in lost, f"{ex_id}/{case}: expected to lose '{check}', lost {sorted(lost)}"
        assert words in lost[check], f"{ex_id}/{case}: message of '{check}' lacks {words!r}: {lost[check]!r}"


@pytest.mark.parametrize(("ex_id", "case"), CASES, ids=[f"{e}/{c}" for e, c in CASES])
def test_wrong_solution_loses_points_on_intended_check(corpus, ex_id, case):
    _loses_as_declared(corpus, ex_id, case)


@pytest.mark.course
@pytest.mark.parametrize(("ex_id", "case"), CASES, ids=[f"{e}/{c}" for e, c in CASES])
def test_wrong_solution_graded_whole_loses_points_on_intended_check(corpus, ex_id, case):
    # Every check run, in the grader's order, as a learner's grading runs them.
    _loses_as_declared(corpus, ex_id, case)


@pytest.mark.parametrize("ex_id", catalog.available())
def test_every_check_is_failed_by_some_wrong_solution(ex_id):
    # A check that no wrong solution can fail is not a check.
    named = {check for case in corpus_cases(ex_id) for check, _ in expectations(ex_id, case)}
    unproven = [c.name for c in read_checks(catalog.grader_file(ex_id)) if c.name not in named]
    assert not unproven, f"{ex_id}: no wrong solution in tests/corpus/{ex_id}/ is declared to fail {unproven}"


FREE = [(ex_id, case) for ex_id, case in CASES if technique_free(ex_id, case)]
# `make test` reads the sampled ones (graded whole there), `make test-course` every one.
FREE_PARAMS = [pytest.param(ex_id, param.values[0], id=f"{ex_id}/{param.id}", marks=param.marks)
               for ex_id in catalog.available() for param in technique_free_params(ex_id)]
# Exercises whose lesson is a technique (the quiz and ex4's arithmetic of rounding have none).
TECHNIQUE_EXERCISES = [e for e in catalog.available() if e not in ("ex4", "quiz")]


@pytest.mark.parametrize(("ex_id", "case"), FREE_PARAMS)
def test_technique_free_solution_scores_at_most_half(corpus, ex_id, case):
    # The README's rule: every number right without the technique earns at most half.
    ex = corpus(ex_id)[case].exercise(ex_id)
    declared = sum(c.points for c in read_checks(catalog.grader_file(ex_id)))
    assert ex["max_score"] == declared
    assert ex["score"] <= declared / 2, f"{ex_id}/{case} scores {ex['score']}/{declared} without the technique"


@pytest.mark.parametrize("ex_id", TECHNIQUE_EXERCISES)
def test_every_technique_is_tried_without_it(ex_id):
    assert any(e == ex_id for e, _ in FREE), f"tests/corpus/{ex_id}/ has no `technique: none` solution"


def _graded_for_its_declared_checks(ex_id: str) -> str:
    """A wrong solution of ex_id the corpora grade for its declared checks only, with checks of the
    grader's before and after them."""
    from grading import graded_whole

    order = [c.name for c in read_checks(catalog.grader_file(ex_id))]
    whole = graded_whole(ex_id)
    return next(case for case in corpus_cases(ex_id) if case not in whole
                and 0 < min(order.index(check) for check, _ in expectations(ex_id, case))
                and max(order.index(check) for check, _ in expectations(ex_id, case)) < len(order) - 1)


# ex10's: its declared check reads restores that an earlier check's reading runs, which it now runs
# itself when it runs alone (it lost nothing alone before).
ALONE = [("ex4", None), ("ex10", "real_make_state_where_the_file_is_imported_again_in_a_process_that_saved")]


@pytest.mark.parametrize(("ex_id", "case"), ALONE, ids=[e for e, _ in ALONE])
def test_a_solution_graded_for_its_declared_checks_reads_as_graded_whole(tmp_path, ex_id, case):
    # `make test` grades most wrong solutions for the checks they declare only (tests/grading.py:
    # graded_whole): a check shares what it reads with the others through memos, never through their
    # order, so it says alone what it says in a whole grading; the others are not run.
    import shutil

    from grading import CORPUS, TEST_SEED
    from graders.runner import grading

    case = case or _graded_for_its_declared_checks(ex_id)
    shutil.copy(CORPUS / ex_id / f"{case}.py", tmp_path / f"{catalog.module_name(ex_id)}.py")
    declared = list(dict.fromkeys(check for check, _ in expectations(ex_id, case)))
    options = grading.Options(seed=TEST_SEED, jobs=1)
    whole = {c.name: c for c in grading.grade_exercise(ex_id, tmp_path, options).checks}
    alone = {c.name: c for c in grading.grade_exercise(ex_id, tmp_path, options, only=declared).checks}
    for name in declared:
        assert (alone[name].outcome, alone[name].message) == (whole[name].outcome, whole[name].message), name
        assert alone[name].outcome == "failed", (name, alone[name].outcome)
    others = [name for name in whole if name not in declared]
    assert all(alone[name].outcome == "not_run" for name in others), [alone[n].outcome for n in others]
    assert any(whole[name].outcome != "not_run" for name in others)


def test_a_run_graded_for_its_declared_checks_refuses_to_say_more(corpus):
    # What a test reads of a wrong solution beyond its declared checks needs a whole grading: a
    # run graded only for them says so rather than answer from checks that did not run.
    run = corpus("ex4")[_graded_for_its_declared_checks("ex4")]
    assert run.only
    run.lost("ex4", declared=True)
    assert run.lost("ex4", among={run.only[0]}) == {run.only[0]: run.lost("ex4", declared=True)[run.only[0]]}
    others = {c.name for c in read_checks(catalog.grader_file("ex4"))} - set(run.only)
    for read in (lambda: run.lost("ex4"), lambda: run.exercise("ex4"), lambda: run.check("ex4", run.only[0]),
                 lambda: run.lost("ex4", among={run.only[0], *others})):
        with pytest.raises(AssertionError, match="graded only for"):
            read()


def test_what_a_test_reads_of_a_named_solution_is_what_the_corpora_grade_it_for():
    # tests/grading.py plans each wrong solution's checks from the tests' own reads: a test whose
    # every read names its checks (`among=`, spelled out in its file) gets those graded, anything
    # else the solutions it names graded whole.
    import ast

    from grading import _reads_of

    names = {"MEMORY": {"memory"}}

    def reads(source: str):
        return _reads_of(ast.parse(source).body[0], names)

    assert reads("def t(c):\n c('e')['a'].lost('e', among=MEMORY)\n c('e')['b'].lost('e', among={'x'})") == {"memory", "x"}
    assert reads("def t(c):\n c('e')['a'].lost('e', among=MEMORY)\n c('e')['a'].lost('e')") is None
    assert reads("def t(c):\n c('e')['a'].exercise('e')") is None
    assert reads("def t(c):\n c('e')['a'].check('e', 'memory')") is None
    assert reads("def t(c):\n c('e')['a'].lost('e', among=MEMORY | {'x'})") == {"memory", "x"}
    assert reads("def t(c):\n c('e')['a'].lost('e', among=UNKNOWN)") is None
    assert reads("def t(c):\n c('e')['a'].lost('e', among=MEMORY | UNKNOWN)") is None
    assert reads("def t(c, checks):\n c('e')['a'].lost('e', among=checks)") is None
