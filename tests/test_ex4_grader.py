"""Exercise 4's grader, beyond the corpus: the grid really separates the closed forms from the
step-by-step answers, and the threshold's expected value means what the stub says it means."""

import ml_dtypes
import numpy as np

from grading import TEST_SEED
from graders.exercises.ex4_master_weights import checks as g

EX = "ex4"
BF16 = ml_dtypes.bfloat16


def test_every_grid_case_separates_closed_forms_from_float32_steps():
    # A bit-for-bit comparison only catches a closed form on cases where the two differ.
    for case in g.GRID:
        assert not set(g.fp32_closed_forms(*case)) & g.fp32_steps(*case), case


def test_drawn_master_cases_round_at_every_step_and_separate_the_closed_forms():
    for seed in range(TEST_SEED, TEST_SEED + 50):
        for w0, lr, grad, steps in g.master_cases(seed):
            update = np.float32(lr) * np.float32(grad)
            assert update == lr * grad and len(g.fp32_steps(w0, lr, grad, steps)) == 1  # every spelling agrees
            w = np.float32(w0)
            assert np.float32(w - update) != np.float64(w) - np.float64(update)  # the first step rounds
            assert not set(g.fp32_closed_forms(w0, lr, grad, steps)) & g.fp32_steps(w0, lr, grad, steps), (seed, w0)
            assert np.isfinite(g.fp32_steps(w0, lr, grad, steps).pop())


def test_threshold_is_where_bf16_storage_starts_to_move():
    # Below the threshold an update is rounded away; just above it, the stored value moves.
    ws = (1.5, 1.0, 0.5 + 2**-10, 1 - 2**-10, g.SMALLEST_SUBNORMAL, 5 * g.SMALLEST_SUBNORMAL, g.SMALLEST_NORMAL)
    for w in ws:
        stored, t = float(BF16(w)), g.threshold(w)
        assert float(BF16(stored - 0.99 * t)) == stored, w
        assert float(BF16(stored - 1.01 * t)) < stored, w


def test_unrounded_formula_is_only_caught_by_the_new_inputs():
    # The fixed inputs of rounding_threshold_matches_bf16_spacing cannot tell this mistake apart;
    # rounds_w_to_bf16_first and below_the_smallest_normal can.
    first = (1.5, 3.0, 0.1, 1000.0, 0.75, 6.5e-3, 1.0, 2.0)
    assert all(np.isclose(g.threshold_of_unrounded(w), g.threshold(w), rtol=g.THRESHOLD_RTOL, atol=0) for w in first)
    for w in (0.5 + 2**-10, 5 * g.SMALLEST_SUBNORMAL):
        assert not np.isclose(g.threshold_of_unrounded(w), g.threshold(w), rtol=g.THRESHOLD_RTOL, atol=0), w


def test_closed_form_master_keeps_every_other_point(corpus):
    lost = corpus(EX)["closed_form_master"].lost(EX)
    assert set(lost) == {"master_matches_float32_simulation"}, lost


# Seeds the edge draws are tried on: the tests' own, and enough others that a draw which happens
# not to separate a mistake would show.
SEEDS = (TEST_SEED, *range(60))
MISTAKES = (*g.ROUNDINGS, "old spacing")


def test_rounding_by_bits_is_round_to_nearest_even():
    # The grader's hand rounding (for naming mistakes) and ml_dtypes (for expected values) are two
    # computations of bf16 storage; they agree on ties, both signs, near powers of two, subnormals.
    r = np.random.default_rng(0)
    xs = [float(np.float32(v)) for v in r.normal(size=2000) * 2.0 ** r.integers(-140, 120, size=2000)]
    for seed in SEEDS[:5]:
        xs += [w for ws in g.threshold_draws(seed).values() for w in ws]
        xs += [g.float32_exact(c[0] - c[1] * c[2] * k) for c in g.edge_cases(seed) for k in (0.5, 1.5, 2.5)]
    for x in xs:
        for v in (x, -x):
            assert g.round_bits(v) == float(BF16(v)), v


def test_edge_cases_hold_ties_and_stay_normal():
    for seed in SEEDS:
        for w0, lr, grad, steps in g.edge_cases(seed):
            # the update is the same number in every spelling the grader accepts
            assert np.float32(lr * grad) == np.float32(BF16(lr * grad)) == np.float32(BF16(lr) * BF16(grad))
            path = [float(BF16(w0))]
            for _ in range(steps):
                path.append(float(BF16(np.float32(path[-1]) - np.float32(lr * grad))))
            assert all(abs(w) >= g.SMALLEST_NORMAL for w in path), (seed, w0, lr, grad, steps)
        # the first two land exactly halfway between two bf16 numbers at their first step
        for w0, lr, grad, _ in g.edge_cases(seed)[:2]:
            new = np.float32(w0) - np.float32(lr * grad)
            assert int(new.view(np.uint32)) & 0xFFFF == 0x8000, (seed, w0, lr, grad)


def test_every_rounding_mistake_ends_elsewhere_on_some_drawn_case():
    for seed in SEEDS:
        cases = g.GRID + g.edge_cases(seed)
        for mode in MISTAKES:
            assert any(g.bf16_steps_rounded(*c, mode) not in g.bf16_steps(*c) for c in cases), (seed, mode)
        # and each is told from every other, so that the message can name it
        for i, a in enumerate(MISTAKES):
            for b in MISTAKES[i + 1:]:
                assert any(g.bf16_steps_rounded(*c, a) != g.bf16_steps_rounded(*c, b) for c in cases), (seed, a, b)


def test_threshold_draws_catch_every_hand_rounding_of_w():
    for seed in SEEDS:
        draws = g.threshold_draws(seed)
        for w in (w for ws in draws.values() for w in ws):
            assert w > 0 and g.float32_exact(w) == w and float(BF16(w)) > 0, (seed, w)
        for mode in g.ROUNDINGS:
            assert any(not np.isclose(g.threshold_rounded(w, mode), g.threshold(w), rtol=g.THRESHOLD_RTOL, atol=0)
                       for w in draws["rounded"]), (seed, mode)
        assert any(float(BF16(w)) < g.SMALLEST_NORMAL for w in draws["subnormal"]), seed
