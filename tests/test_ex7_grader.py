"""Exercise 7's wrong solutions, beyond the check each declares (tests/test_wrong_solutions.py):
what else they lose, and what they keep."""

import importlib.util
from pathlib import Path

import jax
import numpy as np
from jax._src import core
import pytest

from grading import ROOT, TEST_SEED, declared, technique_free_params
from graders.exercises.ex7_megatron_tp import checks, probes
from graders.kit import program, wire
from graders.kit.verdicts import CheckFailed

EX = "ex7"

NUMBERS = {"tp_mlp_matches_numpy", "shard_map_mlp_matches_numpy",
           "sgd_training_matches_single_device", "adam_training_matches_single_device"}


@pytest.mark.parametrize("case", technique_free_params(EX))
def test_right_numbers_without_the_technique_keep_the_numeric_points(corpus, case):
    # ... and at most half of all points (tests/test_wrong_solutions.py).
    lost = corpus(EX)[case].lost(EX)
    assert not NUMBERS & set(lost), f"{case}: its numbers are right, yet it lost {sorted(NUMBERS & set(lost))}"


def test_numbers_alone_are_at_most_half_of_the_points():
    points = declared(EX)
    assert sum(points[n] for n in NUMBERS) <= sum(points.values()) / 2


def test_hardcoded_axis_size_passes_where_it_happens_to_be_right(corpus):
    # pmean * 4 is right when "model" has 4 devices, so the (2, 4) mesh cannot catch it; (4, 2) does.
    lost = corpus(EX)["hardcoded_model_axis_size"].lost(EX)
    assert "(4, 2) mesh" in lost["shard_map_mlp_matches_numpy"]
    assert "shard_map_forward_communicates_once" not in lost  # one all-reduce, like the reference


def test_psum_over_both_axes_keeps_the_collective_count(corpus):
    # Summing over both axes is still one all-reduce: only the numbers and the jaxpr see it.
    lost = corpus(EX)["psum_over_both_axes"].lost(EX)
    assert set(lost) == {"shard_map_mlp_matches_numpy", "shard_map_psums_partial_sums_once_over_model"}, lost


@pytest.mark.parametrize("case", ["weights_summed_by_one_psum", "psum_of_zeros_beside_gather"])
def test_a_psum_that_does_not_add_the_partial_sums_is_not_megatron(corpus, case):
    # Both hold exactly one psum over "model" and get every number right.
    lost = corpus(EX)[case].lost(EX)
    assert "shard_map_psums_partial_sums_once_over_model" in lost
    assert "each_device_does_its_share_of_the_work" in lost or "shard_map_forward_communicates_once" in lost
    assert not NUMBERS & set(lost)


def test_replicated_moments_lose_only_the_state_check(corpus):
    # The moments are replicated after init but every number is right: only the spec check sees it.
    lost = corpus(EX)["state_from_unsharded_params"].lost(EX)
    assert set(lost) == {"optimizer_state_carries_parameter_specs"}, lost
    assert "opt_state[0].mu['w1']" in lost["optimizer_state_carries_parameter_specs"]


def test_stale_state_is_named_for_both_optimizers(corpus):
    lost = corpus(EX)["stale_optimizer_state"].lost(EX)
    assert set(lost) == {"sgd_training_matches_single_device", "adam_training_matches_single_device"}, lost


# Steps that move more than Megatron does, with every number, spec and FLOP figure right: w2 split
# by columns costs each device only 1.2-1.4x its share of the FLOPs, within the slack, so only the
# compiled step's collectives, compared with the grader's own Megatron step, can tell.
MOVES_TOO_MUCH = ["step_gathers_predictions", "step_gathers_gradients", "step_gathers_updates",
                  "step_gathers_optimizer_state", "step_assembles_updates_by_flat_psum",
                  "step_gathers_gradients_by_block_sized_psums"]


@pytest.mark.parametrize("case", MOVES_TOO_MUCH)
def test_a_step_that_moves_more_than_megatron_loses_only_the_collective_check(corpus, case):
    lost = corpus(EX)[case].lost(EX)
    assert set(lost) == {"training_step_communicates_like_megatron"}, lost


def test_w2_split_by_columns_repeats_work_only_where_data_holds_one_device(corpus):
    # Where both axes are split, w2 split by columns costs each device 1.2-1.4x its share, within the
    # slack; on (1, 8) every device gathers the whole batch's activations, every hidden unit, and does
    # 3.8x its share (seed 20261130): the SGD step taken there loses the FLOP check too.
    lost = corpus(EX)["step_w2_by_columns"].lost(EX)
    assert set(lost) == {"training_step_communicates_like_megatron", "each_device_does_its_share_of_the_work"}, lost
    assert "(1, 8) mesh" in lost["each_device_does_its_share_of_the_work"]


@pytest.mark.parametrize("case", ["unjitted_step", "update_outside_jit"])
def test_a_step_is_judged_as_written_not_as_the_grader_jits_it(corpus, case):
    # Its numbers, communication and work are right; only the check that it is jitted fails.
    lost = corpus(EX)[case].lost(EX)
    assert set(lost) == {"training_step_is_jitted"}, lost


@pytest.mark.parametrize("case", ["init_on_fixed_mesh", "init_specs_by_shape"])
def test_init_tp_state_is_tried_beyond_the_mesh_and_sizes_where_it_happens_to_be_right(corpus, case):
    # Right on the (2, 4) mesh (a mesh of its own) or wherever D != H (leaves placed by shape).
    lost = corpus(EX)[case].lost(EX)
    assert set(lost) == {"optimizer_state_carries_parameter_specs"}, lost


def test_sizes_are_drawn_with_their_edges():
    from graders.exercises.ex7_megatron_tp import checks as grader

    drawn = [grader.configs(seed) for seed in range(40)]
    main = {cfg[grader.main_shape(seed)] for seed, cfg in enumerate(drawn)}
    assert len(main) > 20, main  # not a fixed size, nor a handful to look up
    for seed, cfg in enumerate(drawn):
        d, h, _ = cfg[grader.other_shape(seed)]
        assert d == h, cfg  # a weight and its transpose, and the two moments, share one shape
        hs = [h for _, h, _ in cfg.values()]
        assert len(set(hs)) == len(hs), cfg  # a hidden size written as a number is right on one mesh at most
        assert any(h & (h - 1) == 0 for h in hs) and any(h & (h - 1) for h in hs), cfg
        # Momentum SGD is read with square weights too, on (1, 8), at a batch no weight's dim equals.
        d, h, b = grader.one_axis_sizes((1, 8), seed)
        assert d == h != b, (seed, d, h, b)


# Megatron's own SGD step on (4, 2) at D=16, H=40, B=48: the partial sums over "model", the two
# gradient blocks and the loss over "data" (op, dims, axis), as _own_step_collectives reads them.
OWN_4_2 = [("all-reduce", (12, 16), "model"), ("all-reduce", (16, 20), "data"), ("all-reduce", (20, 16), "data"),
           ("all-reduce", (), "data")]
CONFIG = (16, 40, 48)


def _unneeded(rows, recomputes=False):
    from graders.exercises.ex7_megatron_tp.checks import unneeded_collectives
    return unneeded_collectives([(op, dims, axis, times) for op, dims, axis, times in rows], OWN_4_2, CONFIG,
                                (4, 2), recomputes)


def test_megatrons_values_summed_in_other_pieces_move_nothing_more():
    own = [(op, dims, axis, 1) for op, dims, axis in OWN_4_2]
    assert _unneeded(own) == ([], {})
    recomputed = [own[0], *own]  # jax.checkpoint recomputes the forward's all-reduce
    assert _unneeded(recomputed, recomputes=True) == ([], {})
    assert set(_unneeded(recomputed)[1]) == {"model"}
    two_d_bucket = [own[0], ("all-reduce", (16, 40), "data", 1)]  # both blocks side by side: (D, H) on (4, 2)
    assert _unneeded(two_d_bucket) == ([], {})
    bucket = [("all-reduce", (12, 16), "model", 1), ("all-reduce", (640,), "data", 1)]
    assert _unneeded(bucket) == ([], {})
    halves = [("all-reduce", (12, 16), "model", 1), ("reduce-scatter", (4, 20), "data", 1),
              ("reduce-scatter", (20, 4), "data", 1), ("all-gather", (16, 20), "data", 1),
              ("all-gather", (20, 16), "data", 1)]
    assert _unneeded(halves) == ([], {})
    micro = [("all-reduce", (6, 16), "model", 2), ("all-reduce", (16, 20), "data", 1),
             ("all-reduce", (20, 16), "data", 1)]
    assert _unneeded(micro) == ([], {})
    assert _unneeded([("all-reduce", (16, 20), "none", 1), *own]) == ([], {})  # groups of one device


def test_sums_beyond_megatrons_on_an_axis_or_gathers_of_its_arrays_are_named():
    own = [(op, dims, axis, 1) for op, dims, axis in OWN_4_2]
    # The same bucket over "model" (a zero-padded gather of whole updates), or summed beside
    # Megatron's own gradient sums (twice the traffic over "data").
    extra, surplus = _unneeded([*own, ("all-reduce", (640,), "model", 1)])
    assert extra == [("all-reduce", (640,))] and surplus == {}
    extra, surplus = _unneeded([*own, ("all-reduce", (12, 16), "model", 1)])  # the forward's sums twice
    assert extra == [] and surplus["model"][1:] == (2 * 192, 192)
    extra, surplus = _unneeded([*own, ("all-reduce", (640,), "data", 1)])
    assert set(surplus) == {"data"}
    # Micro-batches in a loop of more trips than the rows hold: more partial sums than Megatron's.
    extra, surplus = _unneeded([("all-reduce", (6, 16), "model", 3), *own[1:]])
    assert set(surplus) == {"model"}
    # A batch, a whole weight or activations gathered over either axis; a permute; both axes at once.
    for row in [("all-gather", (48, 16), "data", 1), ("all-gather", (16, 40), "model", 1),
                ("all-gather", (12, 40), "model", 1), ("collective-permute", (16, 20), "model", 1),
                ("all-reduce", (16, 20), "both", 1)]:
        extra, surplus = _unneeded([*own, row])
        assert extra == [row[:2]] and surplus == {}, row
    # Megatron's own array repeated (pieces of a gather sized like the forward's sums), and small
    # sums run in a loop beyond what a loss needs: each counted every time it runs.
    assert set(_unneeded([*own, ("all-reduce", (12, 16), "model", 7)])[1]) == {"model"}
    extra, surplus = _unneeded([*own, ("all-reduce", (16,), "model", 40)])
    assert extra == [] and set(surplus) == {"model"}
    assert _unneeded([*own, ("all-reduce", (16,), "data", 2), ("all-reduce", (), "data", 4)]) == ([], {})
    # Under jax.checkpoint the forward's partial sums may be summed twice over "model", no more.
    twice = [("all-reduce", (6, 16), "model", 4), *own[1:]]
    assert _unneeded(twice, recomputes=True) == ([], {})
    assert set(_unneeded(twice)[1]) == {"model"}


def test_micro_batches_partial_sums_are_no_activations_where_d_equals_h():
    # On the Adam run's mesh D == H: a micro-batch's (B/data/2, D) partial sums hold an H too, but
    # no second dim of B or B/data rows, so they are summed pieces, not gathered activations.
    from graders.exercises.ex7_megatron_tp.checks import unneeded_collectives
    own = [("all-reduce", (24, 48), "model"), ("all-reduce", (48, 12), "data"), ("all-reduce", (12, 48), "data"),
           ("all-reduce", (), "data")]
    micro = [("all-reduce", (12, 48), "model", 2), ("all-reduce", (48, 12), "data", 1),
             ("all-reduce", (12, 48), "data", 1)]
    assert unneeded_collectives(micro, own, (48, 48, 48), (2, 4), False) == ([], {})
    # Gathered activations of B/data rows have the partial sums' very shape here: what is summed
    # over "model" in all tells them apart.
    gathered = [*micro, ("all-gather", (24, 48), "model", 1)]
    extra, surplus = unneeded_collectives(gathered, own, (48, 48, 48), (2, 4), False)
    assert extra == [] and surplus["model"][1:] == (2 * 12 * 48 + 24 * 48 / 2, 24 * 48)

# ---- the programs handed over in-process (no --sandbox) and sent (--sandbox) -------------------

def _module(path: str):
    spec = importlib.util.spec_from_file_location(f"ex7_handed_{Path(path).stem}", ROOT / path)
    sol = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sol)
    return sol


def _asked(sol, shape, kind: str):
    """What the probe replies for one program of `kind` (as checks.forward, step and state_runs ask
    for it), and the arguments of checks.decoded after it."""
    if kind == "forward":
        reply = probes.forward_program(sol, "tp_mlp", shape, *checks.forward_inputs(TEST_SEED, shape))
        return reply, ("tp_mlp", shape, 3, 1)
    if kind == "step":
        inputs = checks.training_problem("sgd", TEST_SEED)
        n = len(jax.tree.leaves(probes.placed_training(probes.mesh(shape), checks.OPTIMIZERS["sgd"], *inputs)))
        reply = probes.step_program(sol, checks.OPTIMIZERS["sgd"], shape, *inputs)["step"]
        return reply, ("your training step", shape, n, n - 1)
    host, x, y = checks.state_problem(TEST_SEED, shape)
    reply = probes.init_programs(sol, checks.OPTIMIZERS["adam"], shape, host, x, y)["init"]
    return reply, ("init_tp_state", shape, (2, 0), None)


def _judged(reply, args) -> str:
    try:
        return str(checks.decoded(reply, *args))
    except CheckFailed as exc:
        return f"failed: {exc}"


@pytest.mark.parametrize("path, kind", [("reference/ex7_megatron_tp.py", "forward"),
                                        ("tests/right/ex7/init_donating_put.py", "init"),
                                        ("tests/corpus/ex7/loss_on_host_callback.py", "step")])
def test_a_program_handed_over_in_process_is_read_as_the_judge_reads_the_one_sent(path, kind, monkeypatch):
    # Without --sandbox the probe files the traced program itself beside its encoding
    # (probes.IN_PROCESS) and the judge reads it as decoding would rebuild it (program.as_sent):
    # nothing is decoded (jax.nn.relu's custom_jvp a jit of its primal, a donating device_put a
    # copying one). Under --sandbox (no nonce in the worker's process) the encoding is sent and
    # decoded: the same program, or for a program that cannot be sent (a pure_callback: the case
    # tests/corpus/ex7/loss_on_host_callback.py) the same message, in both modes.
    sol = _module(path)
    shape = checks.BOTH_AXES_SPLIT[0]
    reply, args = _asked(sol, shape, kind)
    decode = program.decode
    if kind == "step":  # cannot be sent: its reason, never filed
        assert "unreadable" in reply and "pure_callback" in reply["unreadable"], reply
    else:
        assert set(reply) == {"in_process"}, reply
        message, traced = probes.IN_PROCESS[(probes.IN_PROCESS["judge"], reply["in_process"])]
        assert isinstance(traced, core.Jaxpr) and "program" in message
        assert program.as_sent(traced, forward=True, donated_as_copies=True) is not None

        def refused(*a, **k):
            raise AssertionError("the judge decoded a program handed over in-process")
        monkeypatch.setattr(program, "decode", refused)
    in_process = _judged(reply, args)
    monkeypatch.setattr(program, "decode", decode)
    monkeypatch.delitem(probes.IN_PROCESS, "judge")  # the worker's process under --sandbox
    sent, _ = _asked(sol, shape, kind)
    assert "in_process" not in sent
    assert in_process == _judged(wire.round_trip(sent), args)
    if kind == "step":
        assert in_process.startswith("failed: the program of your training step on a") and "pure_callback" in in_process


@pytest.mark.parametrize("path, replicates", [("reference/ex7_megatron_tp.py", False),
                                              ("tests/right/ex7/step_draws_the_weights_placement_on_its_first_call.py", False),
                                              ("tests/right/ex7/step_carries_a_device_step_counter.py", "carried"),
                                              ("tests/right/ex7/step_keeps_an_ema_of_the_params_in_a_dict.py", "carried"),
                                              ("tests/corpus/ex7/wrong_step_replicates_when_fed_its_own_outputs.py", True),
                                              ("tests/corpus/ex7/wrong_step_replicates_when_fed_back_with_a_device_step_counter.py",
                                               True),
                                              ("tests/corpus/ex7/wrong_step_replicates_when_fed_back_reading_the_previous_batch.py",
                                               True),
                                              ("tests/corpus/ex7/wrong_step_replicates_when_fed_back_behind_a_float_of_the_previous_loss.py",
                                               True)])
@pytest.mark.parametrize("in_process", [True, False])
def test_a_step_fed_its_own_outputs_is_read_only_where_it_makes_another_program(path, replicates, in_process,
                                                                                monkeypatch):
    # The probe traces the step's second call, fed the very arrays its first returned; the judge
    # compiles it only where it is not the first call's program (a right step's is the same, in
    # both modes: no compilation more), and there reads where its params land. A second call that
    # reads what the first left (a counter the wrapper carries, a kept batch), or that float() of
    # the last loss keeps from being traced chained, is read after a first call run for real: what
    # it reads besides its inputs comes in as hidden inputs sent with the values the first call left.
    sol = _module(path)
    shape = checks.BOTH_AXES_SPLIT[0]
    if not in_process:
        monkeypatch.delitem(probes.IN_PROCESS, "judge")  # the worker's process under --sandbox
    inputs = checks.training_problem("sgd", TEST_SEED)
    n = len(jax.tree.leaves(probes.placed_training(probes.mesh(shape), checks.OPTIMIZERS["sgd"], *inputs)))
    reply = probes.step_program(sol, checks.OPTIMIZERS["sgd"], shape, *inputs)
    if not in_process:
        reply = wire.round_trip(reply)
    assert set(reply) == {"step", "fed_back"}
    fed_back = reply["fed_back"]
    cut = fed_back["cut"] if "values" in fed_back else fed_back
    assert set(cut) == ({"in_process"} if in_process else {"program", "types"}), fed_back
    closed = checks.decoded(reply["step"], "your training step", shape, n, n - 1)
    later, hidden, values = checks.fed_back_program(fed_back, closed, shape, n)
    assert (values is None) == (hidden == 0) and len(values or []) == hidden
    if replicates == "carried":
        assert later is not None and [tuple(v.aval.sharding.spec) for v in later.outvars[:2]] == [
            tuple(probes.W1_SPEC), tuple(probes.W2_SPEC)]
        if "counter" in path:  # the count the first call left, not zeros
            assert [int(a) for a in values if np.shape(a) == ()] == [1], values
        return
    if not replicates:
        assert later is None
        return
    assert later is not None and str(later) != str(closed)
    specs = [tuple(v.aval.sharding.spec) for v in later.outvars[:2]]
    assert specs == [(None, None), (None, None)], specs


def test_a_counter_is_a_hidden_input_where_no_first_call_is_run_for_real():
    # Without a first call run for real (make_tp_train_step cannot be called again), a value the
    # wrapper carries stays an input of the cut of its own, which the judge feeds zeros.
    sol = _module("tests/right/ex7/step_carries_a_device_step_counter.py")
    shape = checks.BOTH_AXES_SPLIT[0]
    m = probes.mesh(shape)
    inputs = checks.training_problem("sgd", TEST_SEED)
    with jax.set_mesh(m):
        args = probes.placed_training(m, checks.OPTIMIZERS["sgd"], *inputs)
        batch = probes.put(m, np.asarray(inputs[2])[::-1], probes.X_SPEC), probes.put(m, np.asarray(inputs[3])[::-1],
                                                                                     probes.X_SPEC)
    step = sol.make_tp_train_step(m, probes.make_tx(checks.OPTIMIZERS["sgd"]))
    reply = probes.fed_back(sol, m, step, *args, *batch)
    assert reply.get("hidden") == 1, reply


def test_training_problems_are_drawn_away_from_relus_kink():
    # At seed 869370 the first draw puts a pre-activation within 1e-8 of ReLU's kink during the SGD
    # run: reference/ took the other side of it than the grader's own step and lost a point. The
    # problem is drawn again there, and the simulation the margin is read from is the grader's run.
    from graders.exercises.ex7_megatron_tp.checks import (KINK_MARGIN, ONE_AXIS_MESHES, RUNS, STEPS, configs,
                                                          nearest_the_kink, one_axis_sizes, problem, run_shape,
                                                          training_problem)

    seed = 869370
    assert nearest_the_kink(*problem(seed, configs(seed)[run_shape("sgd", seed)], RUNS["sgd"]), "sgd", STEPS) < 1e-7
    for opt in ("sgd", "adam"):
        assert nearest_the_kink(*training_problem(opt, seed), opt, STEPS) >= KINK_MARGIN
    for shape in ONE_AXIS_MESHES:
        sizes = one_axis_sizes(shape, seed)
        assert nearest_the_kink(*training_problem("sgd", seed, sizes), "sgd", STEPS) >= KINK_MARGIN
