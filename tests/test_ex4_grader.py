"""Exercise 4's grader, beyond the corpus: the grid really separates the closed forms from the
step-by-step answers, and the threshold's expected value means what the stub says it means."""

import ml_dtypes
import numpy as np

from graders.exercises.ex4_master_weights import checks as g

EX = "ex4"
BF16 = ml_dtypes.bfloat16


def test_every_grid_case_separates_closed_forms_from_float32_steps():
    # A bit-for-bit comparison only catches a closed form on cases where the two differ.
    for case in g.GRID:
        assert not set(g.fp32_closed_forms(*case)) & g.fp32_steps(*case), case


def test_threshold_is_where_bf16_storage_starts_to_move():
    # Below the threshold an update is rounded away; just above it, the stored value moves.
    ws = (1.5, 1.0, 0.5 + 2**-10, 1 - 2**-10, g.SMALLEST_SUBNORMAL, 5 * g.SMALLEST_SUBNORMAL, g.SMALLEST_NORMAL)
    for w in ws:
        stored, t = float(BF16(w)), g.threshold(w)
        assert float(BF16(stored - 0.99 * t)) == stored, w
        assert float(BF16(stored - 1.01 * t)) < stored, w


def test_unrounded_formula_is_only_caught_by_the_new_inputs():
    # The inputs of rounding_threshold_matches_bf16_spacing cannot tell this mistake apart;
    # rounds_w_to_bf16_first and below_the_smallest_normal can.
    first = (1.5, 3.0, 0.1, 1000.0, 0.75, 6.5e-3, 1.0, 2.0)
    assert all(np.isclose(g.threshold_of_unrounded(w), g.threshold(w), rtol=g.THRESHOLD_RTOL, atol=0) for w in first)
    for w in (0.5 + 2**-10, 5 * g.SMALLEST_SUBNORMAL):
        assert not np.isclose(g.threshold_of_unrounded(w), g.threshold(w), rtol=g.THRESHOLD_RTOL, atol=0), w


def test_closed_form_master_keeps_every_other_point(corpus):
    lost = corpus(EX)["closed_form_master"].lost(EX)
    assert set(lost) == {"master_matches_float32_simulation"}, lost
