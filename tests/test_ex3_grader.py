"""Exercise 3's grader rejects each known wrong solution on the check meant to catch it."""

import pytest

from grading import corpus_cases

EX = "ex3"

NUMBERS = {"loss_matches_single_device", "gradients_match_single_device", "fsdp_loss_works_under_set_mesh"}

# wrong solution in tests/corpus/ex3/ -> (check that must lose its points, words its message names)
CASES = {
    "psum_not_pmean": ("loss_matches_single_device", "because lax.psum adds them"),
    "divide_by_hardcoded_8": ("loss_matches_single_device", "divided by 8, though this mesh has 4 devices"),
    "gather_batch_too": ("each_device_does_its_share_of_the_work", "every device computes on the whole batch"),
    "replicated_params": ("weights_enter_shard_map_sharded", "so nothing is sharded"),
    "replicated_in_specs": ("loss_matches_single_device", "in_specs do not match how the arguments arrive"),
    "no_shard_map": ("weights_enter_shard_map_sharded", "there is no shard_map in the traced loss"),
    "inferred_in_specs": ("gradients_stay_sharded", "write in_specs out"),
    "ignores_mesh_argument": ("loss_matches_single_device", "binds to the first mesh it is called under"),
    "fsdp_loss_left_as_stub": ("fsdp_loss_works_under_set_mesh", "not attempted yet"),
}


def test_every_wrong_solution_has_an_expectation():
    assert set(corpus_cases(EX)) == set(CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_wrong_solution_loses_points_on_intended_check(corpus, case):
    check, words = CASES[case]
    lost = corpus(EX)[case].lost(EX)
    assert check in lost, f"{case}: expected to lose '{check}', lost {sorted(lost)}"
    assert words in lost[check], f"{case}: message of '{check}' lacks {words!r}: {lost[check]!r}"


def test_psum_is_blamed_in_the_gradient_too(corpus):
    lost = corpus(EX)["psum_not_pmean"].lost(EX)
    assert "8 times the gradient" in lost["gradients_match_single_device"]


def test_hardcoded_8_passes_on_8_devices_and_fails_on_4(corpus):
    lost = corpus(EX)["divide_by_hardcoded_8"].lost(EX)
    assert "mesh of 4 devices" in lost["gradients_match_single_device"]
    assert "fsdp_loss_works_under_set_mesh" not in lost  # 8 devices: the hard-coded 8 happens to be right


def test_gathered_batch_keeps_every_other_point(corpus):
    # The numbers and collectives are right; only the FLOP count gives it away.
    lost = corpus(EX)["gather_batch_too"].lost(EX)
    assert set(lost) == {"each_device_does_its_share_of_the_work"}
    assert "126,720" in lost["each_device_does_its_share_of_the_work"]


@pytest.mark.parametrize("case", ["replicated_params", "no_shard_map"])
def test_unsharded_gradients_are_caught_on_an_auto_mesh_and_in_the_hlo(corpus, case):
    lost = corpus(EX)[case].lost(EX)
    assert "expected P('fsdp', None) for both" in lost["gradients_stay_sharded"]
    assert "summed whole with an all-reduce" in lost["gradient_all_gathers_and_reduce_scatters"]
    assert not NUMBERS & set(lost), f"{case}: its numbers are right, yet it lost {sorted(NUMBERS & set(lost))}"
