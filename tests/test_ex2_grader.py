"""Exercise 2's grader rejects each known wrong solution on the check meant to catch it."""

import pytest

from grading import corpus_cases

EX = "ex2"

# wrong solution in tests/corpus/ex2/ -> (check that must lose its points, words its message names)
CASES = {
    "whole_network_whatever_k": ("one_checkpoint_per_group_inside_a_scan", "one checkpoint around the whole network whatever k"),
    "every_layer_whatever_k": ("one_checkpoint_per_group_inside_a_scan", "a checkpoint on every layer whatever k"),
    "layer_checkpoint_inside_group": ("one_checkpoint_per_group_inside_a_scan", "each layer inside the group is checkpointed"),
    "no_checkpoint": ("one_checkpoint_per_group_inside_a_scan", "found no checkpoint at all"),
    "groups_swapped": ("one_checkpoint_per_group_inside_a_scan", "the groups are the wrong way round"),
    "python_loop_over_groups": ("one_checkpoint_per_group_inside_a_scan", "a Python loop unrolls them"),
    "none_means_whole_network": ("no_checkpoint_when_k_is_none", "k=None is the no-checkpointing baseline"),
    "peak_memory": ("temp_memory_bytes_matches_measurement", "That is peak_memory_in_bytes"),
    "forward_memory": ("temp_memory_bytes_matches_measurement", "That is the forward pass's memory"),
    "isqrt_group_size": ("best_group_size_is_the_measured_minimum", "That is isqrt(L)"),
    "powers_of_two_only": ("best_group_size_is_the_measured_minimum", "not only 1, 2, 4"),
    "sum_not_mean": ("loss_matches_float64_forward", "not its mean"),
    "no_residual": ("loss_matches_float64_forward", "without the residual connection"),
}


def test_every_wrong_solution_has_an_expectation():
    assert set(corpus_cases(EX)) == set(CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_wrong_solution_loses_points_on_intended_check(corpus, case):
    check, words = CASES[case]
    lost = corpus(EX)[case].lost(EX)
    assert check in lost, f"{case}: expected to lose '{check}', lost {sorted(lost)}"
    assert words in lost[check], f"{case}: message of '{check}' lacks {words!r}: {lost[check]!r}"


def test_memory_checks_see_the_whole_network_and_every_layer_mistakes(corpus):
    # The measured curve itself gives these two away, whatever the jaxpr looks like.
    whole = corpus(EX)["whole_network_whatever_k"].lost(EX)
    assert "one checkpoint around the whole network" in whole["sqrt_group_uses_less_memory_than_k1_and_kL"]
    every = corpus(EX)["every_layer_whatever_k"].lost(EX)
    assert "a checkpoint on every layer whatever k" in every["sqrt_group_uses_less_memory_than_k1_and_kL"]
    assert "a checkpoint on every layer whatever k" in every["whole_network_checkpoint_saves_nothing"]
    assert "as if there were no checkpoint at all" in corpus(EX)["no_checkpoint"].lost(EX)["sqrt_group_uses_less_memory_than_k1_and_kL"]


def test_value_checks_pass_for_structural_mistakes(corpus):
    # Checkpointing changes memory, never values: these keep the numeric points.
    for case in ("whole_network_whatever_k", "every_layer_whatever_k", "no_checkpoint", "groups_swapped",
                 "python_loop_over_groups", "peak_memory", "isqrt_group_size"):
        lost = corpus(EX)[case].lost(EX)
        assert not {"loss_matches_float64_forward", "gradient_matches_no_checkpoint_gradient"} & set(lost), (case, sorted(lost))
