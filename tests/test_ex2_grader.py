"""Exercise 2's wrong solutions, beyond the check each declares (tests/test_wrong_solutions.py):
what else they lose, what they keep, and the grading policy."""

import pytest

EX = "ex2"
# What these tests read of a solution is all the corpora grade it for, beside its declared checks
# (tests/grading.py: graded_for).
VALUE_CHECKS = {"loss_matches_float64_forward", "gradient_matches_float64_gradient"}
MEASUREMENTS = {"temp_memory_bytes_matches_measurement", "best_group_size_is_the_measured_minimum"}
NUMERIC_CHECKS = VALUE_CHECKS | MEASUREMENTS
MEMORY = {"gradient_memory_matches_the_grouped_checkpoint"}
MEMORY_AND_STRUCTURE = {"gradient_memory_matches_the_grouped_checkpoint", "one_checkpoint_per_group_inside_a_scan"}


def test_right_numbers_without_a_checkpoint_keep_the_numeric_points(corpus):
    # Loss, gradient, temp_memory_bytes and best_group_size all right, grouped_loss without any
    # checkpoint: only technique checks are lost (at most half: tests/test_wrong_solutions.py).
    lost = corpus(EX)["no_checkpoint_numbers_right"].lost(EX, among=NUMERIC_CHECKS)
    assert not lost, sorted(lost)


def test_flat_curve_loses_the_measurements(corpus):
    # No checkpoint, and temp_memory_bytes / best_group_size measure the learner's own flat curve:
    # both are compared with the grader's own grouped checkpoint, so both lose.
    lost = corpus(EX)["no_checkpoint"].lost(EX, among=MEASUREMENTS)
    assert MEASUREMENTS <= set(lost)


def test_saving_policies_lose_the_memory_check_too(corpus):
    for case in ("dots_saveable_policy", "everything_saveable_policy"):
        lost = corpus(EX)[case].lost(EX, among=MEMORY_AND_STRUCTURE)
        assert "gradient_memory_matches_the_grouped_checkpoint" in lost, (case, sorted(lost))
        # the structure is right: only the policy and what it costs are wrong
        assert "one_checkpoint_per_group_inside_a_scan" not in lost, (case, sorted(lost))


def test_memory_checks_see_the_whole_network_and_every_layer_mistakes(corpus):
    # The measured memory gives these two away, whatever the jaxpr looks like.
    whole = corpus(EX)["whole_network_whatever_k"].lost(EX, among=MEMORY)
    assert "whole network whatever k" in whole["gradient_memory_matches_the_grouped_checkpoint"]
    every = corpus(EX)["every_layer_whatever_k"].lost(EX, among=MEMORY)
    assert "a checkpoint on every layer whatever k" in every["gradient_memory_matches_the_grouped_checkpoint"]


def test_value_checks_pass_for_structural_mistakes(corpus):
    # Checkpointing changes memory, never values: these keep the numeric points.
    for case in ("whole_network_whatever_k", "every_layer_whatever_k", "no_checkpoint", "groups_swapped",
                 "python_loop_over_groups", "python_loop_inside_group", "dots_saveable_policy",
                 "everything_saveable_policy", "no_checkpoint_when_k_is_L", "peak_memory", "isqrt_group_size"):
        lost = corpus(EX)[case].lost(EX, among=VALUE_CHECKS)
        assert not lost, (case, sorted(lost))


@pytest.mark.course  # compiles a gradient for every divisor of every drawable configuration: 20-30 s
def test_no_formula_in_L_and_no_search_over_a_few_divisors_finds_both_optima(compiled_as_graded):
    # The two best_group_size configurations share L, and the grader's own measurements give them
    # different optima, for every L, B and D that can be drawn: so no function of L alone (the
    # divisor nearest sqrt(L), sqrt(L/2), ...) passes. The first kind's optimum is neither 1, L,
    # the divisor nearest sqrt(L) nor a power of two, so a search over {1, ~sqrt(L), L} or over
    # the powers of two misses it; and every runner-up is further off than a tie. Compiled as the
    # grading processes compile: their figures are the ones the checks compare with.
    import math

    from graders.exercises.ex2_sqrt_checkpointing import checks as g

    for L, kinds in g.PAIR_SHAPES.items():
        divisors = g.divisors(L)
        assert len(divisors) >= 8, (L, divisors)
        near_sqrt = min(divisors, key=lambda k: abs(k - math.sqrt(L)))
        optima = []
        for kind in kinds:
            found = set()
            for B, D in kind:
                assert len({L, B, D}) == 3, (L, B, D)  # every axis a distinct size
                curve = {k: g.own_temp(L, B, D, k) for k in divisors}
                first, second = sorted(curve, key=curve.get)[:2]
                assert curve[second] > curve[first] * (1 + 5 * g.TIE_RTOL), (L, B, D, curve)
                found.add(first)
            assert len(found) == 1, (L, found)  # one optimum per kind, whatever is drawn
            optima.append(found.pop())
        assert optima[0] != optima[1], (L, optima)
        assert optima[0] not in {1, L, near_sqrt} and optima[0] & (optima[0] - 1), (L, optima)


def test_pair_draws_reach_every_length_and_shape():
    from graders.exercises.ex2_sqrt_checkpointing import checks as g

    drawn = {tuple(g.pair_configs(seed)) for seed in range(200)}
    every = {((L, *a), (L, *w)) for L, (first, second) in g.PAIR_SHAPES.items() for a in first for w in second}
    assert drawn == every


@pytest.mark.course  # compiles a right float32 gradient on every draw: 10-15 s
def test_float32_tolerance_admits_a_right_float32_answer_on_every_draw_and_nothing_one_percent_off(compiled_as_graded):
    """Dozens of residual layers amplify float32's rounding: on some draws a right float32
    gradient is further from float64 than numeric.RTOL allows (seed 414230 was: the reference
    scored 18/20). The checks widen the tolerance by the grader's own float32 error
    (numeric.float32_rtol); a right float32 program (the grader's grouped checkpoint, another
    order of the same ops) must pass on every draw, and an answer 1% off must not."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from graders.kit import numeric
    from graders.exercises.ex2_sqrt_checkpointing import checks as g

    grads, widened = {}, []
    for seed in (414230, 789725, *range(300)):
        config = g.memory_config(seed)
        w, x = g.make_inputs(seed, *config)
        k = g.middle_k(config[0])
        if config not in grads:
            grads[config] = jax.jit(jax.grad(lambda p, x, k=k: g.own_loss(p, x, k)))
        got = np.asarray(grads[config](*g.as_f32(w, x))["w"], np.float64)
        expected = g.gradient_np(w, x)
        rtol = numeric.float32_rtol(expected, g.own_float32_errors(seed)["grad"])
        assert numeric.is_close(got, expected, rtol=rtol), (seed, config, numeric.max_abs_diff(got, expected), rtol)
        assert not numeric.is_close(expected * 1.01, expected, rtol=rtol), (seed, rtol)
        if not numeric.is_close(got, expected):
            widened.append(seed)
    assert 414230 in widened  # the draw that needed it still does: the test tries what it claims
