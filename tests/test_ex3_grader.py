"""Exercise 3's wrong solutions, beyond the check each declares (tests/test_wrong_solutions.py):
what else they lose, and what they keep."""

import importlib.util

import jax
import pytest

from grading import ROOT, TEST_SEED, technique_free_params
from graders.exercises.ex3_fsdp_shard_map import checks as g
from graders.exercises.ex3_fsdp_shard_map import probes
from graders.kit import jaxpr, program

EX = "ex3"

NUMBERS = {"loss_matches_single_device", "gradients_match_single_device"}
@pytest.mark.parametrize("case", technique_free_params(EX))
def test_right_numbers_without_fsdp_keep_the_numeric_points(corpus, case):
    # ... and at most half of all points (tests/test_wrong_solutions.py).
    lost = corpus(EX)[case].lost(EX)
    assert not NUMBERS & set(lost), f"{case}: its numbers are right, yet it lost {sorted(NUMBERS & set(lost))}"


def test_hardcoded_8_is_caught_on_4_devices_wherever_the_loss_is_graded(corpus):
    lost = corpus(EX)["divide_by_hardcoded_8"].lost(EX)
    assert "mesh of 4 devices" in lost["gradients_match_single_device"]
    assert "(4 devices)" in lost["fsdp_loss_is_a_shard_map_right_on_every_mesh"]


def test_device_count_in_fsdp_loss_only_loses_the_fsdp_loss_check(corpus):
    # make_fsdp_loss(mesh) divides by the mesh's size and is right; fsdp_loss is wrong off 8 devices.
    lost = corpus(EX)["fsdp_loss_divides_by_device_count"].lost(EX)
    assert set(lost) == {"fsdp_loss_is_a_shard_map_right_on_every_mesh"}, lost
    assert "(4 devices)" in lost["fsdp_loss_is_a_shard_map_right_on_every_mesh"]


def test_gathered_batch_keeps_every_other_point(corpus):
    # The numbers and collectives are right; only the FLOP count gives it away.
    lost = corpus(EX)["gather_batch_too"].lost(EX)
    assert set(lost) == {"each_device_does_its_share_of_the_work"}, lost
    # the figure it is measured against: the grader's own single-device program at the 8-device sizes
    single = g.single_device_gradient_flops(*g.sizes(TEST_SEED, 8))
    assert f"single-device program does {single:,.0f}" in lost["each_device_does_its_share_of_the_work"]


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


def test_each_mesh_gets_sizes_of_its_own():
    # No one shape written into a solution is right on every mesh; one mesh has D == H; every
    # device of every mesh gets whole rows of the weights and the batch.
    for seed in (TEST_SEED, *range(40)):
        drawn = {n: g.sizes(seed, n) for n in g.MESH_SIZES}
        assert len({d for d, _, _ in drawn.values()}) == len(g.MESH_SIZES), (seed, drawn)
        assert len({b for _, _, b in drawn.values()}) == len(g.MESH_SIZES), (seed, drawn)
        for n, (d, h, b) in drawn.items():
            assert (d == h) == (n == g.EQUAL_ON), (seed, n, drawn)
            assert d % n == h % n == b % n == 0, (seed, n, drawn)


@pytest.mark.parametrize("path", ["reference/ex3_fsdp_shard_map.py", "tests/right/ex3/custom_vjp_gather_scatters_by_hand.py"])
def test_a_program_handed_over_in_process_is_the_one_the_judge_would_rebuild(path):
    # Without --sandbox the judge reads the traced program in place of rebuilding its encoding
    # (probes.as_sent): verdicts and messages are the same only while the two are one program,
    # jax.nn.relu's custom_jvp and a learner's custom_vjp made jit calls of their primal in both.
    spec = importlib.util.spec_from_file_location("ex3_fsdp_shard_map_handed", ROOT / path)
    sol = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sol)
    n = g.READ_ON
    m = probes.mesh(n)
    args = probes.placed(m, *g.problem(TEST_SEED, n, g.READ_INPUTS))
    with jax.set_mesh(m):
        loss = sol.make_fsdp_loss(m)
        traced = [jax.make_jaxpr(loss)(*args), jax.make_jaxpr(jax.value_and_grad(loss))(*args)]
    assert any(program.CUSTOM & jaxpr.primitive_names(t) for t in traced)
    for t in traced:
        handed, rebuilt = probes.as_sent(t), program.decode(program.encode(t, sol.__file__, forward=True, meshes=True), meshes=True).closed
        assert str(handed) == str(rebuilt)
        assert not program.CUSTOM & jaxpr.primitive_names(handed)
    assert probes.summarize(probes.as_sent(traced[0])) == probes.summarize(
        program.decode(program.encode(traced[0], sol.__file__, forward=True, meshes=True), meshes=True).closed)
