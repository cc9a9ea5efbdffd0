"""Exercise 5's grader rejects each known wrong solution on the check meant to catch it."""

import pytest

from grading import corpus_cases

EX = "ex5"

# wrong solution in tests/corpus/ex5/ -> (check that must lose its points, words its message names)
CASES = {
    "no_checkpoint": ("forward_holds_remat2", "your model is not checkpointed"),
    "checkpoint_one_dense": ("checkpoint_wraps_whole_mlp_class", "none holds both Dense layers"),
    "jax_checkpoint_apply": ("checkpoint_wraps_whole_mlp_class", "You checkpointed a function"),
    "wraps_instance": ("output_matches_unwrapped_mlp", "nn.checkpoint takes the module class, not an instance"),
    "explicit_names": ("parameter_tree_is_dense_0_dense_1", "Explicit layer names change the parameter names"),
    "no_bias": ("parameter_tree_is_dense_0_dense_1", "the layer has no bias"),
    "relu_on_output": ("output_matches_unwrapped_mlp", "a ReLU after the output layer"),
    "no_hidden_relu": ("output_matches_unwrapped_mlp", "without the ReLU between the two Dense layers"),
    "ignores_seed": ("output_matches_unwrapped_mlp", "initialised with PRNGKey(0), not PRNGKey(3)"),
    "split_key": ("output_matches_unwrapped_mlp", "jax.random.split(PRNGKey(seed))[1]"),
    "keeps_batch_axis": ("output_matches_unwrapped_mlp", "got shape (1, 6). Hint: return the model's output flattened"),
    "seed_not_converted": ("accepts_float_seed_and_features", "called with seed=9.0 (a float)"),
    "features_not_converted": ("accepts_float_seed_and_features", "called with features=3.0 (a float)"),
    "donates_x": ("x_is_unchanged", "it was donated"),
}


def test_every_wrong_solution_has_an_expectation():
    assert set(corpus_cases(EX)) == set(CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_wrong_solution_loses_points_on_intended_check(corpus, case):
    check, words = CASES[case]
    lost = corpus(EX)[case].lost(EX)
    assert check in lost, f"{case}: expected to lose '{check}', lost {sorted(lost)}"
    assert words in lost[check], f"{case}: message of '{check}' lacks {words!r}: {lost[check]!r}"


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
