"""Exercise 6's wrong solutions, beyond the check each declares (tests/test_wrong_solutions.py):
what else they lose, and what they keep."""

from grading import technique_free_cases

EX = "ex6"
NUMBERS = {"outputs_match_a_plain_stack", "gradients_match_a_plain_stack"}


def test_policy_mistakes_keep_the_numeric_points(corpus):
    # Checkpointing changes no number: a wrong policy or a wrong place may only cost technique and memory points.
    for case in ("policy_by_primitive_name", "dots_without_policy", "swapped_policies", "whole_stack_remat",
                 "everything_saveable_dots", "attention_half_remat", "mlp_half_remat"):
        lost = corpus(EX)[case].lost(EX)
        assert not NUMBERS & set(lost), case


def test_technique_free_solutions_keep_the_numeric_points(corpus):
    # At most half of the points (tests/test_wrong_solutions.py), all of them for the numbers.
    for case in technique_free_cases(EX):
        assert not NUMBERS & set(corpus(EX)[case].lost(EX)), f"{case} should get every number right"


def test_half_wrapped_blocks_lose_every_technique_point_but_the_count(corpus):
    # One nnx.remat per block, around half of it: the count is right, nothing else of the technique is.
    for case in ("attention_half_remat", "mlp_half_remat"):
        lost = set(corpus(EX)[case].lost(EX))
        assert {"each_checkpoint_holds_a_whole_block", "full_saves_nothing", "dots_uses_dots_saveable",
                "full_remat_matches_per_block_remat"} <= lost, (case, lost)
