"""Right solutions written otherwise than reference/ get full marks. Each file in
tests/right/<id>/ is a right way of doing the exercise that a grader once failed: a check that
reads how the technique is used must accept every way of using it."""

import pytest

from grading import RIGHT, corpus_cases
from graders import catalog

EXERCISES = [ex_id for ex_id in catalog.available() if corpus_cases(ex_id, RIGHT)]
CORPUS_FOLDER = RIGHT  # the folder the `corpus` fixture reads for these tests (tests/conftest.py)


@pytest.mark.parametrize("ex_id", EXERCISES)
def test_right_solution_gets_full_marks(corpus, ex_id):
    for case, run in corpus(ex_id, RIGHT).items():
        ex = run.exercise(ex_id)
        lost = {t["name"]: t["output"] for t in run.results["tests"] if t["score"] < t["max_score"]}
        assert ex["score"] == ex["max_score"], f"tests/right/{ex_id}/{case}.py scores {ex['score']}/{ex['max_score']}: {lost}"
