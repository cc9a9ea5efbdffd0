"""Exercise 5's wrong solutions, beyond the check each declares (tests/test_wrong_solutions.py):
what else they lose, and what they keep."""

import pytest


EX = "ex5"


@pytest.mark.parametrize("case", ["no_checkpoint", "jax_checkpoint_apply"])
def test_right_numbers_without_nn_checkpoint_lose_only_technique_points(corpus, case):
    # The unwrapped model computes the same numbers: only the remat2 checks may catch it.
    lost = corpus(EX)[case].lost(EX)
    assert lost and set(lost) <= {"forward_holds_remat2", "checkpoint_wraps_whole_mlp_class"}


def test_explicit_names_also_change_the_seeded_values(corpus):
    lost = corpus(EX)["explicit_names"].lost(EX)
    assert "output_matches_unwrapped_mlp" in lost
    assert "which Flax folds into each layer's key" in lost["output_matches_unwrapped_mlp"]


def test_no_bias_keeps_the_numbers(corpus):
    # Dense biases start at zero, so only the parameter tree can tell a missing bias.
    assert set(corpus(EX)["no_bias"].lost(EX)) == {"parameter_tree_is_dense_0_dense_1"}
