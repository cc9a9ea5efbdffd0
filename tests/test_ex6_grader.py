"""Exercise 6's wrong solutions, beyond the check each declares (tests/test_wrong_solutions.py):
what else they lose, and what they keep."""

EX = "ex6"


def test_policy_mistakes_keep_the_numeric_points(corpus):
    # Checkpointing changes no number: a wrong policy may only cost technique and memory points.
    for case in ("policy_by_primitive_name", "dots_without_policy", "swapped_policies", "whole_stack_remat"):
        lost = corpus(EX)[case].lost(EX)
        assert not {"outputs_match_a_plain_stack", "gradients_match_a_plain_stack"} & set(lost), case
