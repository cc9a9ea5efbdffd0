"""Exercise 3's wrong solutions, beyond the check each declares (tests/test_wrong_solutions.py):
what else they lose, and what they keep."""

import pytest

from graders import catalog
from graders.spec import read_checks

EX = "ex3"

NUMBERS = {"loss_matches_single_device", "gradients_match_single_device"}
# Every number right, no FSDP: jit's own sharding, or a shard_map that computes from whole weights
# (beside decoy gathers, or around a result that is discarded or multiplied by zero).
WITHOUT_FSDP = ["jit_auto_sharding", "no_shard_map", "replicated_params", "gathered_but_replicated_copy_used",
                "decoy_shard_map_times_zero", "decoy_shard_map_discarded"]


def score(run) -> tuple[float, float]:
    tests = [t for t in run.results["tests"] if t["tags"] == [EX]]
    return sum(t["score"] for t in tests), sum(t["max_score"] for t in tests)


@pytest.mark.parametrize("case", WITHOUT_FSDP)
def test_right_numbers_without_fsdp_score_at_most_half(corpus, case):
    run = corpus(EX)[case]
    lost = run.lost(EX)
    assert not NUMBERS & set(lost), f"{case}: its numbers are right, yet it lost {sorted(NUMBERS & set(lost))}"
    declared = sum(c.points for c in read_checks(catalog.grader_file(EX)))
    got, out_of = score(run)
    assert out_of == declared
    assert got <= declared / 2, f"{case} scores {got}/{declared} without doing FSDP; at most half is allowed"


def test_hardcoded_8_is_caught_on_4_devices_wherever_the_loss_is_graded(corpus):
    lost = corpus(EX)["divide_by_hardcoded_8"].lost(EX)
    assert "mesh of 4 devices" in lost["gradients_match_single_device"]
    assert "(4 devices)" in lost["fsdp_loss_is_a_shard_map_right_on_every_mesh"]


def test_device_count_in_fsdp_loss_only_loses_the_fsdp_loss_check(corpus):
    # make_fsdp_loss(mesh) divides by the mesh's size and is right; fsdp_loss is wrong off 8 devices.
    lost = corpus(EX)["fsdp_loss_divides_by_device_count"].lost(EX)
    assert set(lost) == {"fsdp_loss_is_a_shard_map_right_on_every_mesh"}
    assert "(4 devices)" in lost["fsdp_loss_is_a_shard_map_right_on_every_mesh"]


def test_gathered_batch_keeps_every_other_point(corpus):
    # The numbers and collectives are right; only the FLOP count gives it away.
    lost = corpus(EX)["gather_batch_too"].lost(EX)
    assert set(lost) == {"each_device_does_its_share_of_the_work"}
    assert "126,720" in lost["each_device_does_its_share_of_the_work"]


def test_one_module_level_shard_map_still_passes_fsdp_loss_graded_on_every_mesh(corpus):
    # Each mesh imports the learner's module afresh, so a module-level shard_map binds once per mesh.
    lost = corpus(EX)["ignores_mesh_argument"].lost(EX)
    assert "binds to the first mesh it is called under" in lost["gradients_match_single_device"]
    assert "fsdp_loss_is_a_shard_map_right_on_every_mesh" not in lost


@pytest.mark.parametrize("case", ["replicated_params", "no_shard_map"])
def test_unsharded_gradients_are_caught_on_an_auto_mesh_and_in_the_hlo(corpus, case):
    lost = corpus(EX)[case].lost(EX)
    assert "expected P('fsdp', None) for both" in lost["gradients_stay_sharded"]
    assert "sum a whole weight gradient" in lost["gradient_all_gathers_and_reduce_scatters"]
