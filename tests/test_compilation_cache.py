"""The persistent compilation cache changes how fast grading is, never what it measures."""

import os
import tempfile
from pathlib import Path

from grading import ROOT, grade
from graders import catalog

# Exercises whose report carries compiled-program figures (temp memory, FLOPs, collectives).
MEASURING = [ex for ex in ("ex2", "ex3", "ex6", "ex7") if ex in catalog.available()]


def _grade_with_cache(cache_dir: str, ids=MEASURING, *extra: str):
    old = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = cache_dir
    try:
        return grade(ROOT / "reference", ids, *extra)
    finally:
        if old is None:
            del os.environ["JAX_COMPILATION_CACHE_DIR"]
        else:
            os.environ["JAX_COMPILATION_CACHE_DIR"] = old


def test_measured_figures_are_identical_cold_and_warm():
    with tempfile.TemporaryDirectory() as cache:
        cold = _grade_with_cache(cache)
        # the user's own JAX_COMPILATION_CACHE_DIR is the one used
        assert any(Path(cache).iterdir()), "the cold run wrote nothing to the cache"
        warm = _grade_with_cache(cache)
    for ex in MEASURING:
        assert cold.exercise(ex)["status"] == warm.exercise(ex)["status"] == "passed"
        assert cold.exercise(ex)["notes"], f"{ex} reports no figures"
        assert warm.exercise(ex)["notes"] == cold.exercise(ex)["notes"]



def test_no_cache_option_writes_nothing():
    with tempfile.TemporaryDirectory() as cache:
        run = _grade_with_cache(cache, ["ex4"], "--no-cache")
        assert run.exercise("ex4")["status"] == "passed"
        assert not any(Path(cache).iterdir())
