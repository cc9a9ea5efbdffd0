"""The persistent compilation cache and the graders' stored figures (graders/kit/figure_store.py) change how
fast grading is, never what it measures."""

import json
import tempfile
from pathlib import Path

from grading import MEASURING, ROOT, grade_with_cache


def test_measured_figures_are_identical_cold_and_warm(cold_far_draw):
    # The cold run (conftest.py: an empty cache, at a draw other than the tests' own, which
    # tests/test_drawn_configurations.py reads too), then the same grading again from its cache.
    cold, cache, seed = cold_far_draw
    # the user's own JAX_COMPILATION_CACHE_DIR is the one used
    assert any((cache / "jax").iterdir()), "the cold run wrote nothing to the cache"
    # the figures README's Compilation cache names: the memory of ex2's and ex6's own programs,
    # ex6's block signatures and how far ex2's float32 can be from float64
    stored = {json.loads(p.read_text())["name"] for p in (cache / "expected").iterdir()}
    assert {"ex2 own temp", "ex2 own float32 errors", "ex6 own temp", "ex6 own signatures"} <= stored, stored
    warm = grade_with_cache(cache, MEASURING, "--seed", str(seed))
    for ex in MEASURING:
        assert cold.exercise(ex)["status"] == warm.exercise(ex)["status"] == "passed"
        assert cold.exercise(ex)["notes"], f"{ex} reports no figures"
        assert warm.exercise(ex)["notes"] == cold.exercise(ex)["notes"]


def test_exercise_5_stores_its_expected_parameters():
    with tempfile.TemporaryDirectory() as cache:
        run = grade_with_cache(cache, ["ex5"])
        assert run.exercise("ex5")["status"] == "passed"
        stored = {json.loads(p.read_text())["name"] for p in (Path(cache) / "expected").iterdir()}
        assert stored == {"ex5 plain params"}, stored


def test_a_stub_that_does_not_trace_stores_no_figure_of_exercise_6s_grader():
    # The checks ask for their own figures (and store them) only once the learner's model has
    # traced in some variant; what graders/kit/ahead.py worked out meanwhile is dropped.
    with tempfile.TemporaryDirectory() as cache:
        run = grade_with_cache(cache, ["ex6"], solutions=ROOT / "exercises")
        assert run.exercise("ex6")["status"] == "not attempted"
        assert not (Path(cache) / "expected").exists() or not any((Path(cache) / "expected").iterdir())


def test_no_cache_option_writes_nothing():
    with tempfile.TemporaryDirectory() as cache:
        run = grade_with_cache(cache, ["ex4"], "--no-cache")
        assert run.exercise("ex4")["status"] == "passed"
        assert not any(Path(cache).iterdir())
