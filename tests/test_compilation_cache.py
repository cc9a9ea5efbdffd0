"""The persistent compilation cache and the graders' stored figures (graders/memo.py) change how
fast grading is, never what it measures."""

import os
import tempfile
from pathlib import Path

from grading import ROOT, grade
from graders import catalog

# Exercises whose report carries compiled-program figures (temp memory, FLOPs, collectives).
MEASURING = [ex for ex in ("ex2", "ex3", "ex6", "ex7") if ex in catalog.available()]


def _grade_with_cache(cache_dir: str, ids=MEASURING, *extra: str):
    """Grade with this folder holding the compilation cache (jax/) and the graders' own stored
    figures (expected/, graders/memo.py): the first run computes everything, the next reads."""
    folders = {"JAX_COMPILATION_CACHE_DIR": str(Path(cache_dir) / "jax"),
               "GRADERS_EXPECTED_DIR": str(Path(cache_dir) / "expected")}
    old = {name: os.environ.get(name) for name in folders}
    os.environ.update(folders)
    try:
        return grade(ROOT / "reference", ids, *extra)
    finally:
        for name, value in old.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


def test_measured_figures_are_identical_cold_and_warm():
    with tempfile.TemporaryDirectory() as cache:
        cold = _grade_with_cache(cache)
        # the user's own JAX_COMPILATION_CACHE_DIR is the one used
        assert any((Path(cache) / "jax").iterdir()), "the cold run wrote nothing to the cache"
        assert any((Path(cache) / "expected").iterdir()), "the cold run stored none of the graders' figures"
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
