"""Exercise 2's wrong solutions, beyond the check each declares (tests/test_wrong_solutions.py):
what else they lose, and what they keep."""

EX = "ex2"


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
