"""Right solutions written otherwise than reference/ get full marks. Each file in
tests/right/<id>/ is a right way of doing the exercise that a grader once failed: a check that
reads how the technique is used must accept every way of using it. `make test` grades a fixed
sample of each exercise's (tests/grading.py: sampled_right_cases); `make test-course`, every one."""

import pytest

from grading import RIGHT, corpus_cases
from graders import catalog

EXERCISES = [ex_id for ex_id in catalog.available() if corpus_cases(ex_id, RIGHT)]
CORPUS_FOLDER = RIGHT  # the folder the `corpus` fixture reads for these tests (tests/conftest.py)


def _all_full_marks(runs: dict, ex_id: str) -> None:
    for case, run in runs.items():
        ex = run.exercise(ex_id)
        lost = {t["name"]: t["output"] for t in run.results["tests"] if t["score"] < t["max_score"]}
        assert ex["score"] == ex["max_score"], f"tests/right/{ex_id}/{case}.py scores {ex['score']}/{ex['max_score']}: {lost}"


@pytest.mark.parametrize("ex_id", EXERCISES)
def test_sampled_right_solutions_get_full_marks(corpus, ex_id):
    _all_full_marks(corpus(ex_id, RIGHT), ex_id)


@pytest.mark.course
@pytest.mark.parametrize("ex_id", EXERCISES)
def test_every_right_solution_gets_full_marks(corpus, ex_id):
    _all_full_marks(corpus(ex_id, RIGHT), ex_id)
