"""Graders that draw a configuration from the grading seed give the reference full marks
whatever the seed: the maintainer tests' own seed is one draw among many."""

import ast

import pytest

from grading import ROOT, TEST_SEED, grade
from graders import catalog

OTHER_SEEDS = (TEST_SEED + 1,)  # with the tests' own seed: two draws of each configuration
# A draw of ex2's deepest network on inputs where a right float32 gradient is further from
# float64 than numeric.RTOL allows (the reference once scored 18/20 there).
FLOAT32_LIMIT_DRAW = 414230


def draws_from_the_seed(ex_id: str) -> bool:
    tree = ast.parse(catalog.grader_file(ex_id).read_text())
    return any(isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
               and any(arg.arg == "seed" for arg in node.args.args) for node in tree.body)


DRAWING = [e for e in catalog.available() if draws_from_the_seed(e)]


def test_some_graders_draw_their_configuration():
    assert {"ex2", "ex6", "ex7"} <= set(DRAWING), DRAWING


@pytest.mark.parametrize("seed", OTHER_SEEDS)
def test_reference_gets_full_marks_on_other_draws(seed):
    run = grade(ROOT / "reference", DRAWING, "--seed", str(seed))
    for ex_id in DRAWING:
        assert run.exercise(ex_id)["status"] == "passed", (seed, ex_id, run.lost(ex_id))


def test_reference_gets_full_marks_where_float32_needs_the_widened_tolerance():
    run = grade(ROOT / "reference", ["ex2"], "--seed", str(FLOAT32_LIMIT_DRAW))
    assert run.exercise("ex2")["status"] == "passed", run.lost("ex2")
