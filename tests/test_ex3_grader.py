"""Exercise 3's wrong solutions, beyond the check each declares (tests/test_wrong_solutions.py):
what else they lose, and what they keep."""

import pytest


EX = "ex3"

NUMBERS = {"loss_matches_single_device", "gradients_match_single_device", "fsdp_loss_works_under_set_mesh"}


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
