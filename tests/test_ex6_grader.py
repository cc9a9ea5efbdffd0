"""Exercise 6's wrong solutions, beyond the check each declares (tests/test_wrong_solutions.py):
what else they lose, and what they keep."""

from graders import catalog, spec

EX = "ex6"
NUMBERS = {"outputs_match_a_plain_stack", "gradients_match_a_plain_stack"}
# Every number right, and no checkpoint that does the work: none at all, or decoys.
TECHNIQUE_FREE = ("no_remat", "remat_discarded", "remat_times_zero", "remat_behind_stop_gradient",
                  "remat_around_noop")


def declared_points() -> int:
    return sum(check.points for check in spec.read_checks(catalog.grader_file(EX)))


def score(run) -> float:
    return sum(t["score"] for t in run.results["tests"] if t["tags"] == [EX])


def test_policy_mistakes_keep_the_numeric_points(corpus):
    # Checkpointing changes no number: a wrong policy or a wrong place may only cost technique and memory points.
    for case in ("policy_by_primitive_name", "dots_without_policy", "swapped_policies", "whole_stack_remat",
                 "everything_saveable_dots", "attention_half_remat", "mlp_half_remat"):
        lost = corpus(EX)[case].lost(EX)
        assert not NUMBERS & set(lost), case


def test_technique_free_solutions_score_at_most_half(corpus):
    half = declared_points() / 2
    for case in TECHNIQUE_FREE:
        run = corpus(EX)[case]
        assert not NUMBERS & set(run.lost(EX)), f"{case} should get every number right"
        assert score(run) <= half, f"{case} scores {score(run)} of {declared_points()} without the technique"


def test_half_wrapped_blocks_lose_every_technique_point_but_the_count(corpus):
    # One nnx.remat per block, around half of it: the count is right, nothing else of the technique is.
    for case in ("attention_half_remat", "mlp_half_remat"):
        lost = set(corpus(EX)[case].lost(EX))
        assert {"each_checkpoint_holds_a_whole_block", "full_saves_nothing", "dots_uses_dots_saveable",
                "full_remat_matches_per_block_remat"} <= lost, (case, lost)
