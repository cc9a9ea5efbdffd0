"""Exercise 9's wrong solutions, beyond the check each declares (tests/test_wrong_solutions.py):
what else they lose, and what they keep."""

import pytest

from grading import declared, technique_free_params

EX = "ex9"

NUMBERS = {"decay_mask_marks_weight_matrices", "adamw_step_matches_optax_adamw",
           "adamw_step_continues_from_a_saved_state", "zero1_training_matches_single_device"}


@pytest.mark.parametrize("case", technique_free_params(EX))
def test_right_numbers_without_the_technique_keep_the_numeric_points(corpus, case):
    # ... and at most half of all points (tests/test_wrong_solutions.py).
    lost = corpus(EX)[case].lost(EX)
    assert not NUMBERS & set(lost), f"{case}: its numbers are right, yet it lost {sorted(NUMBERS & set(lost))}"


def test_numbers_alone_are_at_most_half_of_the_points():
    points = declared(EX)
    assert sum(points[n] for n in NUMBERS) <= sum(points.values()) / 2


@pytest.mark.parametrize("case", ["gradient_psummed_whole_then_sliced", "gradient_of_replicated_params_in_shard_map",
                                  "gradient_psummed_with_its_split_axis_first", "gradient_psummed_as_a_flat_buffer"])
def test_a_gradient_summed_whole_loses_only_the_collective_check(corpus, case):
    # Right numbers, moments split, parameters gathered once: only the whole psum is wrong.
    lost = corpus(EX)[case].lost(EX)
    assert set(lost) == {"gradients_are_not_summed_whole"}, lost


def test_moments_gathered_inside_the_step_keep_their_placement_points(corpus):
    # The state comes back split, so only the compiled step shows that it was gathered.
    lost = corpus(EX)["moments_gathered_inside_the_step"].lost(EX)
    assert set(lost) == {"only_the_updated_parameters_are_all_gathered", "each_device_updates_only_its_blocks"}, lost


@pytest.mark.parametrize("case", ["state_from_optax_adam_init", "moments_split_along_the_last_axis",
                                  "moments_split_on_axis_0_or_not_at_all"])
def test_a_misplaced_initial_state_loses_only_the_placement_check(corpus, case):
    # The step is graded from the grader's own placement, so only init_zero1_state is wrong.
    lost = corpus(EX)[case].lost(EX)
    assert set(lost) == {"init_zero1_state_splits_the_moments"}, lost


def test_a_mask_ignored_by_adamw_step_shows_only_with_another_mask(corpus):
    # decay_mask's own mask is the ndim rule, so the training is right: only the grader's own mask
    # (in both adamw_step checks) tells them apart.
    lost = corpus(EX)["adamw_decays_by_ndim"].lost(EX)
    assert set(lost) == {"adamw_step_matches_optax_adamw", "adamw_step_continues_from_a_saved_state"}, lost


@pytest.mark.parametrize("case", ["stale_zero1_state", "gradients_summed_not_averaged"])
def test_a_step_with_wrong_numbers_and_the_right_layout_loses_only_the_numbers(corpus, case):
    lost = corpus(EX)[case].lost(EX)
    assert set(lost) == {"zero1_training_matches_single_device"}, lost


def test_gradients_summed_not_averaged_are_told_by_the_moments(corpus):
    # AdamW's step is nearly blind to a gradient's scale: only the moments show it.
    message = corpus(EX)["gradients_summed_not_averaged"].lost(EX)["zero1_training_matches_single_device"]
    assert message.startswith("state['mu']") and "summed over the" in message, message


def _moments_sliced_twice(m, g, p):
    # The new moments consumed by two slices and a parameter update: XLA's fusion computes them
    # again in each consumer's fusion, and its cost analysis counts every copy.
    new = 0.9 * m + 0.1 * g
    return new[:280].reshape(7, 40), new[280:].reshape(10, 5), p - 0.01 * new


def test_flops_and_optimizer_work_count_what_xla_duplicates_once():
    import jax.numpy as jnp

    from graders.exercises.ex9_zero1_adamw import checks
    from graders.kit import costs

    x = jnp.ones(330)
    exe = costs.compile_fn(_moments_sliced_twice, x, x, x)
    comps = checks.hlo_computations(exe.as_text())
    assert costs.flops(exe) > 5 * 330  # XLA duplicated the 3 operations of the new moments
    # As asked: 3 operations for the new moments, 2 for the update, once each.
    assert checks.asked_flops(exe, comps) == 5 * 330
    # The optimizer's values: those from the moments (0.9 * m, the sum) and the update (2).
    marks = {0: checks.MOMENTS, 1: checks.DATA, 2: checks.PARAMS}
    assert checks.optimizer_work(comps, marks) == 4 * 330


def _update_in_one_branch(m, g, p, first):
    # One branch runs: the same update, written two ways (a conditional is its heaviest branch).
    import jax

    def later(m, g, p):
        new = 0.9 * m + 0.1 * g
        return p - 0.01 * new, new

    def early(m, g, p):
        new = 0.8 * m + 0.2 * g
        return p - 0.02 * new, new

    return jax.lax.cond(first, early, later, m, g, p)


def _update_walked_from_an_offset(m, g, p, start):
    # 330 values, 33 a trip, from `start` while under start + 330: 10 trips XLA does not know.
    import jax

    def body(carry):
        i, p, m = carry
        mc = 0.9 * jax.lax.dynamic_slice(m, (i - start,), (33,)) + 0.1 * jax.lax.dynamic_slice(g, (i - start,), (33,))
        pc = jax.lax.dynamic_slice(p, (i,), (33,)) - 0.01 * mc
        return i + 33, jax.lax.dynamic_update_slice(p, pc, (i,)), jax.lax.dynamic_update_slice(m, mc, (i - start,))

    return jax.lax.while_loop(lambda c: c[0] < start + 330, body, (start, p, m))


def test_optimizer_work_counts_one_branch_and_the_trips_an_index_covers():
    import jax.numpy as jnp

    from graders.exercises.ex9_zero1_adamw import checks
    from graders.kit import costs

    x = jnp.ones(330)
    marks = {0: checks.MOMENTS, 1: checks.DATA, 2: checks.PARAMS}
    exe = costs.compile_fn(_update_in_one_branch, x, x, x, True)
    # One branch's: 0.9 * m, the sum, 0.01 * new, the difference (0.1 * g is the data's); not both's.
    assert checks.optimizer_work(checks.hlo_computations(exe.as_text()), marks) == 4 * 330
    exe = costs.compile_fn(_update_walked_from_an_offset, x, x, jnp.ones(3300), jnp.int32(990))
    walked = checks.numbered(checks.hlo_computations(exe.as_text()), marks)
    assert {times for *_, times, _ in walked} >= {10.0}  # not the 100 trips of the whole 3,300 values
    assert checks.optimizer_work(None, marks, walked) == 4 * 330
