"""Grader for Exercise 7: Megatron tensor parallelism on a 2-D (data, model) mesh.

Expected outputs come from NumPy float64; expected training runs from the grader's own
single-device JAX program with the same optimizer; the FLOP budgets from single-device programs
compiled here. The learner's functions run on (data, model) meshes of the 8 CPU devices, in
graders/probes/ex7_megatron_tp.py: these checks never call them. They send the probes the inputs
drawn here and get back plain data: outputs, sharding keys and specs (as strings), collective
counts, FLOPs, and summaries of the traced programs; every expected value is computed here.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from graders import jaxpr, memory
from graders.learner import fail
from graders.numeric import as_array, as_scalar, assert_close, rng
from graders.probes.ex7_megatron_tp import (
    AXES, PARAM_SPECS, UNSENDABLE, W1_SPEC, W2_SPEC, X_SPEC, make_tx, mesh, sharding_key,
)

# D, H, B all distinct, and distinct from every block size B/data and H/model on the meshes below
# (B/data: 40, 20, 10, 5; H/model: 32, 16, 8, 4), so a gathered array's shape says what it was.
# H and B divide by 8: every device gets whole hidden units and whole rows; D too, so that a
# weight split the wrong way still runs and shows its communication.
D, H, B = 24, 32, 40
MESH_SHAPES = ((2, 4), (4, 2), (1, 8), (8, 1))
# The technique checks read one mesh with both axes larger than 1, drawn from the grading seed (code
# that recognises the mesh it is graded on cannot behave only there); the Adam run and the state
# check use the other one.
BOTH_AXES_SPLIT = ((2, 4), (4, 2))
SHAPES = {"w1": (D, H), "w2": (H, D)}
VERSIONS = {"tp_mlp": "tp_mlp", "shard_map": "your shard_map version"}
# jax.lax.psum binds psum_invariant under shard_map's default check_vma=True, psum without it.
PSUM = frozenset({"psum", "psum_invariant", "psum2"})
# Every other primitive that moves data between the devices of a shard_map body.
OTHER_COLLECTIVES = frozenset({"all_gather", "all_gather_invariant", "all_to_all", "ragged_all_to_all", "ppermute",
                               "reduce_scatter", "psum_scatter", "pmax", "pmin", "pbroadcast"})
COMMUNICATION = ("all-gather", "reduce-scatter", "all-to-all", "collective-permute")

# A device of a (data, model) mesh should do about 1/(data*model) of the single-device program's
# FLOPs: the reference does 1.02-1.03x that share in the forward and 1.09-1.10x in the SGD step
# (the update is elementwise on a weight block split over "model" only); a device that keeps the
# whole batch or the whole weights does 2x or more (measured 2.5x to 9x). 1.5 lies between them.
FLOP_SLACK = 1.5
STEPS = 5
SGD = (0.1, 0.9)  # learning rate, momentum
ADAM_LR = 1e-2
# Sharded and single-device float32 add the same terms in another order: after 5 momentum-SGD
# steps (an update linear in the gradient) parameters and losses differ by ~3e-7 relative here.
SGD_RTOL = 1e-5
# Adam divides by sqrt(v): where a gradient entry is near zero, its rounding noise becomes a step
# of up to the learning rate, so sharded and single-device runs may part by far more than the
# rounding (the chapter measured 1.6e-4 after 5 steps at lr 1e-2; ~1e-7 here). A tenth of the
# learning rate allows that, and still fails an optimizer state that is not carried (losses 7e-3
# apart by step 3). Adam ignores the gradient's scale: a wrong scale is the SGD check's to catch.
ADAM_ATOL = ADAM_LR / 10


def main_shape(seed: int):
    return BOTH_AXES_SPLIT[int(rng(seed).integers(len(BOTH_AXES_SPLIT)))]


def other_shape(seed: int):
    return next(s for s in BOTH_AXES_SPLIT if s != main_shape(seed))


def problem(seed: int):
    r = rng(seed)
    return r.normal(size=(D, H)) * 0.3, r.normal(size=(H, D)) * 0.3, r.normal(size=(B, D)), r.normal(size=(B, D))


def mlp_np(w1, w2, x):
    return np.maximum(x @ w1, 0.0) @ w2


def same_sharding(shape, spec, placed, ndim: int) -> bool:
    """Whether what a probe says of a returned array's placement (its sharding_key, computed where
    the learner's code runs) is the key of NamedSharding(spec) on this mesh, computed here."""
    key = placed.get("key") if isinstance(placed, dict) else None
    return key is not None and key == sharding_key(NamedSharding(mesh(shape), spec), ndim)


def received(value, what: str, shape=None):
    """A value a probe sent back, or a failed check naming what came back if it could not be sent."""
    if isinstance(value, dict) and set(value) == {UNSENDABLE}:
        expected = "" if shape is None else f" of shape {tuple(shape)}"
        fail(f"{what}: expected an array{expected}, got {value[UNSENDABLE]}. "
             "Hint: return the value itself, not a description of it.")
    return value


def source_of(program: dict, key: str):
    """The primitive a probe says makes a traced program's output (None: an input), or the failed
    check a grader error gets if the probe could not read it."""
    if program[f"{key}_error"]:
        fail(f"could not check what your code returned: {program[f'{key}_error']}. "
             "Hint: compare the types and shapes you return with the docstring.")
    return program[key]


def forward_inputs(seed: int):
    w1, w2, x, _ = problem(seed)
    return w1, w2, x


def forward(worker, version: str, shape):
    """(what the probe says of one version compiled on one mesh, the float64 inputs): the probe
    compiles it once for the numbers, spec, collective and FLOP checks."""
    inputs = forward_inputs(10 + MESH_SHAPES.index(shape))
    return worker.forward(version, shape, *inputs), inputs


def mistakes_of(w1, w2, x, shape):
    """(value, message) of the known wrong answers on a (data, model) mesh, computed here."""
    data, model = shape
    y = mlp_np(w1, w2, x)
    found = [(np.maximum(x @ w1 @ w2, 0.0),
              "That is relu((x @ w1) @ w2): the activation was applied after adding the partial sums. relu of "
              "a sum is not the sum of relus; apply relu to each device's own hidden units, before the second "
              "matmul, and add the partial sums last.")]
    if model > 1:
        k = H // model
        found.append((np.maximum(x @ w1[:, :k], 0.0) @ w2[:k],
                      f"That is one device's partial sum (hidden units 0..{k - 1}), never added to the others: no "
                      "psum over 'model'. Hint: return lax.psum(partial, 'model')."))
        found.append((y / model,
                      f"That is the result divided by {model}, the size of 'model': lax.pmean averages the partial "
                      "sums where they must be added. Hint: use lax.psum(partial, 'model')."))
    for size in (2, 4, 8):
        if size != model:
            found.append((y * size / model,
                          f"That is {size}/{model} times the result: an axis size hard-coded as {size} though "
                          f"'model' has {model} devices here. Hint: lax.psum adds the partial sums; nothing needs "
                          "the axis size."))
    if data > 1:
        summed = y.reshape(data, B // data, D).sum(axis=0)
        found.append((np.tile(summed, (data, 1)),
                      "That adds the different batch rows of the 'data' axis together: the psum runs over 'data' "
                      "as well. Hint: the partial sums live along 'model' only: lax.psum(partial, 'model')."))
    return found



def check_forward_numbers(worker, version: str):
    for shape in MESH_SHAPES:
        got, (w1, w2, x) = forward(worker, version, shape)
        where = f"{VERSIONS[version]} on a (data, model) = {shape} mesh"
        assert_close(received(got["out"], where, (B, D)), mlp_np(w1, w2, x), where,
                     mistakes=mistakes_of(w1, w2, x, shape),
                     hint="Hint: relu(x_blk @ w1_blk) @ w2_blk on each device, then one sum over 'model'.")


@pytest.mark.points(2)
def test_tp_mlp_matches_numpy(worker):
    """tp_mlp equals relu(x @ w1) @ w2 in float64 on (2, 4), (4, 2), (1, 8) and (8, 1) meshes."""
    check_forward_numbers(worker, "tp_mlp")


@pytest.mark.points(2)
def test_shard_map_mlp_matches_numpy(worker):
    """The shard_map version equals relu(x @ w1) @ w2 in float64 on the same four meshes."""
    check_forward_numbers(worker, "shard_map")


@pytest.mark.points(1)
def test_outputs_sharded_by_data(worker, seed):
    """Both versions return y sharded P("data", None) on a (2, 4) or (4, 2) mesh."""
    shape = main_shape(seed)
    for version in VERSIONS:
        got = forward(worker, version, shape)[0]
        what = f"{VERSIONS[version]}'s output"
        as_array(received(got["out"], what, (B, D)), what, (B, D))
        if same_sharding(shape, X_SPEC, got["placed"], 2):
            continue
        spec = got["placed"]["spec"]
        why = ""
        if same_sharding(shape, P(), got["placed"], 2):
            why = (" It is replicated: every device holds the whole batch's output, which costs an all-gather "
                   "over 'data' (out_sharding=P() or out_specs=P() asks for that).")
        fail(f"{VERSIONS[version]}'s output comes out {spec}; expected P('data', None): each data group keeps its "
             f"own rows, whole along D, after the sum over 'model'.{why} Hint: out_sharding=P('data', None) on "
             "the second matmul (global view), out_specs=P('data', None) (shard_map).")


def split_over_model(spec, dim: int) -> bool:
    """Whether dim of a traced value is split over 'model', from its spec's entries as a probe sent them."""
    if spec is None or dim >= len(spec):
        return False
    entry = spec[dim]
    return entry == "model" or (isinstance(entry, tuple) and "model" in entry)


@pytest.mark.points(2)
def test_tp_mlp_states_the_output_sharding(worker, seed):
    """tp_mlp's second matmul contracts the split hidden units and states out_sharding=P("data", None)."""
    shape = main_shape(seed)
    program = worker.tp_mlp_program(shape, *forward_inputs(21))
    split = []
    for dot in program["dots"]:
        lhs_c, rhs_c = dot["lhs_contracting"], dot["rhs_contracting"]
        if lhs_c and all(split_over_model(dot["lhs_spec"], d) for d in lhs_c) and \
                all(split_over_model(dot["rhs_spec"], d) for d in rhs_c):
            split.append(dot)
    if not split:
        fail("no matmul in tp_mlp contracts the hidden units while they are split over 'model': the weights or the "
             "activations were moved (or handed to the compiler, e.g. with auto_axes) before the second matmul, so "
             "its partial sums never appear. Hint: keep h = relu(x @ w1) as it comes out, (B@data, H@model), and "
             "write jnp.matmul(h, w2, out_sharding=P('data', None)) with w2 as it arrives.")
    expected = sharding_key(NamedSharding(mesh(shape), X_SPEC), 2)
    if not any(dot["stated_key"] == expected for dot in split):
        shown = ", ".join(dot["stated"] for dot in split)
        fail(f"the second matmul, which adds partial sums over 'model', states out_sharding {shown}; expected "
             "P('data', None): the sum stays split by batch rows, whole along D. Hint: "
             "jnp.matmul(h, w2, out_sharding=P('data', None)).")
    source = source_of(program, "output_source")
    if not any(dot["is_output"] for dot in split):
        made = "an input" if source is None else f"the result of {jaxpr.said(source)}"
        fail(f"tp_mlp returns {made}, not the result of its second matmul: a tensor-parallel matmul whose result is "
             "only combined with a value computed some other way does not do the work. Hint: return "
             "jnp.matmul(h, w2, out_sharding=P('data', None)) itself.")


def gathered(shapes, *targets) -> list[tuple[str, tuple]]:
    wanted = {tuple(sorted(t)) for t in targets}
    return [(op, s) for op, s in shapes if tuple(sorted(s)) in wanted]


def check_one_all_reduce(worker, version: str, shape, note):
    got = forward(worker, version, shape)[0]
    counts, shapes = got["collectives"], got["collective_shapes"]
    found = ", ".join(f"{n} {op}" for op, n in counts.items() if n) or "no collectives"
    note(f"collectives in the compiled forward of {VERSIONS[version]} on a {shape} mesh: {found}")
    if counts["all-reduce"] == 1 and not any(counts[op] for op in COMMUNICATION):
        return
    data, model = shape
    if counts["all-to-all"] or gathered(shapes, (B // data, H), (B, H)):
        why = ("the activations relu(x @ w1) are gathered across 'model', every hidden unit onto every device, as "
               "happens when w2 is split by columns (or h is resharded before the second matmul). With w2 split "
               "by rows, P('model', None), each device's hidden units meet their own rows of w2")
    elif gathered(shapes, SHAPES["w1"], SHAPES["w2"]):
        why = ("the weights are gathered whole onto each device: that is FSDP's move, not tensor parallelism, "
               "where every device keeps its own hidden units and never sees the others'")
    elif gathered(shapes, (B, D)):
        why = ("the batch rows are gathered across 'data': the output (or the input) ends up replicated, e.g. "
               "out_sharding=P(), which adds communication; keep y split by rows, P('data', None)")
    elif counts["all-reduce"] == 0:
        why = "nothing adds the partial sums of the second matmul"
    elif counts["all-reduce"] > 1:
        why = "the partial sums are added more than once, or something else is summed across devices"
    else:
        why = "something besides the one sum moves data between devices"
    fail(f"the compiled forward of {VERSIONS[version]} holds {found}; Megatron's forward needs exactly one "
         f"all-reduce (adding the second matmul's partial sums over 'model') and nothing else. Here {why}. Hint: "
         "take the inputs as they arrive (w1 P(None, 'model'), w2 P('model', None), x P('data', None)) and move "
         "nothing but the partial sums.")


@pytest.mark.points(2)
def test_tp_mlp_forward_communicates_once(worker, note, seed):
    """tp_mlp's compiled forward holds one all-reduce and no all-gather, reduce-scatter or all-to-all."""
    check_one_all_reduce(worker, "tp_mlp", main_shape(seed), note)


@pytest.mark.points(2)
def test_shard_map_forward_communicates_once(worker, note, seed):
    """The shard_map version's compiled forward holds one all-reduce and no other collective."""
    check_one_all_reduce(worker, "shard_map", main_shape(seed), note)



@pytest.mark.points(2)
def test_shard_map_psums_partial_sums_once_over_model(worker, seed):
    """The shard_map version returns one lax.psum over "model" of the (B/data, D) partial sums, its only collective."""
    shape = main_shape(seed)
    program = worker.shard_map_program(shape, *forward_inputs(20))
    if not program["shard_maps"]:
        seen = ", ".join(sorted({jaxpr.said(name) for name in program["primitives"]})) or "nothing"
        fail(f"there is no shard_map in your shard_map version (it holds: {seen}). Hint: return "
             "jax.shard_map(f, mesh=mesh, in_specs=..., out_specs=P('data', None)), where f works on one "
             "device's blocks and adds the partial sums with lax.psum(partial, 'model').")
    source = source_of(program, "output_source")
    if source is None or source not in jaxpr.ALIASES["shard_map"] or program["body"] is None:
        made = "an input" if source is None else f"the result of {jaxpr.said(source)}"
        fail(f"your function returns {made}, not the result of its shard_map: a shard_map whose output is only "
             "combined with (or added to) a value computed some other way does not do the work. Hint: return the "
             "shard_map's result itself.")
    body = program["body"]
    psums = [e for e in body if e["primitive"] in PSUM]
    others = sorted({e["primitive"] for e in body if e["primitive"] in OTHER_COLLECTIVES})
    if len(psums) != 1:
        more = ("none: the partial sums are never added (or the weights were gathered, FSDP-style, so there was "
                "nothing to add)" if not psums else f"{len(psums)}")
        fail(f"expected exactly one lax.psum whose result is used, found {more}. Megatron needs one: each device's "
             "partial sum relu(x_blk @ w1_blk) @ w2_blk, added over 'model'. Hint: return lax.psum(partial, 'model').")
    if others:
        fail(f"besides its psum, your shard_map body also moves data with {', '.join(jaxpr.said(name) for name in others)}: the weights or the "
             "activations travel (e.g. gathered whole, FSDP's move), where Megatron moves nothing but the partial "
             "sums. Hint: use each device's own blocks as they arrive; only lax.psum(partial, 'model').")
    eqn = psums[0]
    axes = tuple(eqn["axes"])
    if axes != ("model",):
        why = ("over 'data' too: that adds different batch rows together" if "model" in axes
               else "over 'data' only: the partial sums lie along 'model'")
        fail(f"your psum runs over {axes}, expected ('model',) only: {why}. Hint: lax.psum(partial, 'model').")
    block = (B // shape[0], D)
    added = eqn["operand_shape"]
    if added != block:
        fail(f"your psum adds an array of shape {added}; on this {shape} mesh each device's partial sum "
             f"relu(x_blk @ w1_blk) @ w2_blk has shape {block} (B/data, D), and that is what must be added. "
             "Hint: compute the whole local MLP first, then psum its output over 'model'.")
    last = source_of(program, "body_output_source")
    if not eqn["is_output"]:
        made = "an input" if last is None else f"the result of {jaxpr.said(last)}"
        fail(f"your shard_map body returns {made}, computed after the psum, not the psum itself: in Megatron's MLP the "
             "sum over 'model' is the last step (relu comes before the second matmul, on each device's own hidden "
             "units). Hint: return lax.psum(relu(x_blk @ w1_blk) @ w2_blk, 'model').")


def single_loss(params, x, y):
    return jnp.mean((jax.nn.relu(x @ params["w1"]) @ params["w2"] - y) ** 2)


def single_step(tx):
    def step(params, state, x, y):
        loss, grads = jax.value_and_grad(single_loss)(params, x, y)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss
    return step


# The optimizers, as plain configs: the probes build the learner's tx from the same one (make_tx).
OPTIMIZERS = {"sgd": {"name": "sgd", "learning_rate": SGD[0], "momentum": SGD[1]},
              "adam": {"name": "adam", "learning_rate": ADAM_LR}}


@functools.cache
def single_step_jit(opt: str):
    return jax.jit(single_step(make_tx(OPTIMIZERS[opt])))


@functools.cache
def single_device_flops():
    """FLOPs of the grader's own forward and SGD step on one device, at the exercise's sizes."""
    w1, w2, x, y = (jnp.asarray(a, jnp.float32) for a in problem(0))
    params = {"w1": w1, "w2": w2}
    tx = make_tx(OPTIMIZERS["sgd"])
    fwd = memory.flops(memory.compile_fn(lambda a, b, c: jax.nn.relu(c @ a) @ b, w1, w2, x))
    step = memory.flops(memory.compile_fn(single_step(tx), params, tx.init(params), x, y))
    return fwd, step


def single_run(opt: str, seed: int, keep_state: bool = True):
    """STEPS steps of the grader's own single-device training: final params and the losses."""
    w1, w2, x, y = (jnp.asarray(a, jnp.float32) for a in problem(seed))
    tx = make_tx(OPTIMIZERS[opt])
    params = {"w1": w1, "w2": w2}
    step = single_step_jit(opt)
    state, losses = tx.init(params), []
    for _ in range(STEPS):
        params, new_state, loss = step(params, state, x, y)
        state = new_state if keep_state else state
        losses.append(float(loss))
    return {k: np.asarray(v, np.float64) for k, v in params.items()}, np.array(losses)


def learner_run(worker, opt: str, shape, seed: int):
    """STEPS steps of the learner's training step from the grader's placement (params split
    Megatron-style, the state made from them), run by the probe: final params and the losses."""
    got = worker.train(OPTIMIZERS[opt], shape, *problem(seed), STEPS)
    losses = [as_scalar(received(loss, f"the loss of step {i + 1}"), f"the loss of step {i + 1}")
              for i, loss in enumerate(got["losses"])]
    if got["params"] is None:
        fail(f"step should return params as a dict with keys 'w1' and 'w2', got {got['params_type']}.")
    return got["params"], np.array(losses)


def check_training(worker, opt: str, shape, seed: int, rtol: float, atol: float):
    params, losses = learner_run(worker, opt, shape, seed)
    expected, expected_losses = single_run(opt, seed)
    stale_params, stale_losses = single_run(opt, seed, keep_state=False)
    name = "momentum SGD" if opt == "sgd" else "Adam"
    where = f"after {STEPS} steps of {name} on a (data, model) = {shape} mesh"
    stale = ("That is what training gives when the optimizer state is not carried from step to step. Hint: "
             "return the new opt_state from tx.update, not the one passed in.")
    hint = ("Hint: the loss is the mean of (tp_mlp(w1, w2, x) - y) ** 2 over every element; step with "
            "tx.update(grads, opt_state, params) and optax.apply_updates.")
    assert_close(losses, expected_losses, f"the {STEPS} losses {where}", hint, mistakes=[(stale_losses, stale)],
                 rtol=rtol, atol=atol)
    for k in ("w1", "w2"):
        assert_close(received(params[k], f"{k} {where}", SHAPES[k]), expected[k], f"{k} {where}", hint,
                     mistakes=[(stale_params[k], stale)], rtol=rtol, atol=atol)


@pytest.mark.points(1)
def test_sgd_training_matches_single_device(worker, seed):
    """5 momentum-SGD steps on a (2, 4) or (4, 2) mesh give the single-device params and losses to ~1e-5."""
    check_training(worker, "sgd", main_shape(seed), 30, SGD_RTOL, 1e-6)


@pytest.mark.points(1)
def test_adam_training_matches_single_device(worker, seed):
    """5 Adam steps on a (4, 2) or (2, 4) mesh give the single-device params and losses within Adam's rounding."""
    check_training(worker, "adam", other_shape(seed), 31, 0.0, ADAM_ATOL)


@pytest.mark.points(2)
def test_each_device_does_its_share_of_the_work(worker, note, seed):
    """Per-device FLOPs of both forwards and the SGD step on (2, 4) or (4, 2) are about 1/8 of one device's."""
    shape = main_shape(seed)
    share_of = shape[0] * shape[1]
    fwd, step = single_device_flops()
    programs = [(f"the forward of {VERSIONS[v]}", forward(worker, v, shape)[0]["flops"], fwd) for v in VERSIONS]
    programs.append(("the training step", worker.step_flops(OPTIMIZERS["sgd"], shape, *problem(30)), step))
    for what, got, single in programs:
        share = single / share_of
        note(f"per-device FLOPs of {what} on a {shape} mesh: {got:,.0f} (one device: {single:,.0f}; "
             f"a 1/{share_of} share: {share:,.0f})")
        if share / FLOP_SLACK <= got <= FLOP_SLACK * share:
            continue
        if not got >= share / FLOP_SLACK:  # a NaN, a zero or a negative figure is no program's either
            fail(f"each device does {got:,.0f} FLOPs in {what}; one device alone does {single:,.0f}, so a share on "
                 f"a {shape} mesh is about {share:,.0f}, and yours is less than 1/{FLOP_SLACK:g} of that: no "
                 "compiled program that computes the whole result, split over the devices, does so little on each.")
        fail(f"each device does {got:,.0f} FLOPs in {what}; one device alone does {single:,.0f}, so a share on a "
             f"{shape} mesh is about {share:,.0f}, and yours is {got / share:.1f} times that: devices repeat each "
             "other's work (a whole batch, or whole weights, on every device). Hint: each device multiplies its "
             "own B/data rows by its own H/model hidden units; nothing is gathered.")


def moment_specs(leaves):
    """(path, placement, ndim, expected spec) for every leaf of the optimizer state shaped like a
    parameter (the moments), from the leaves a probe described."""
    rows = []
    for leaf in leaves:
        shape = tuple(leaf["shape"])
        for k, s in SHAPES.items():
            if shape == s:
                rows.append((leaf["path"], leaf["placed"], len(shape), PARAM_SPECS[k]))
    return rows


def check_specs(shape, placement, when: str):
    params = placement["params"]
    for k in ("w1", "w2"):
        if not same_sharding(shape, PARAM_SPECS[k], params[k], 2):
            fail(f"{when}, params['{k}'] is {params[k]['spec']}; expected {PARAM_SPECS[k]} (w1 split by columns, "
                 "w2 by rows over 'model'). Hint: jax.device_put(w, NamedSharding(mesh, spec)).")
    moments = moment_specs(placement["leaves"])
    if not moments:
        fail(f"{when}, the optimizer state holds no array shaped like a parameter; Adam keeps two moments per "
             "parameter. Hint: opt_state = tx.init(placed_params).")
    wrong = [(path, placed, ndim, spec) for path, placed, ndim, spec in moments
             if not same_sharding(shape, spec, placed, ndim)]
    if wrong:
        path, placed, ndim, spec = wrong[0]
        replicated = same_sharding(shape, P(), placed, ndim)
        why = ("replicated: the state was made by tx.init from the unsharded parameters, so every device stores "
               "every moment whole, which is the memory tensor parallelism should split"
               if replicated else "not split like its parameter")
        fail(f"{when}, the optimizer state's moment opt_state{path} is {placed['spec']}, expected {spec}: it is "
             f"{why}. Hint: call tx.init on the placed parameters; zeros_like inherits their sharding.")


@pytest.mark.points(2)
def test_optimizer_state_carries_parameter_specs(worker, seed):
    """init_tp_state places params Megatron-style with Adam moments split alike, and a step keeps them."""
    shape = other_shape(seed)
    w1, w2, x, y = problem(32)
    host = {"w1": np.asarray(w1, np.float32), "w2": np.asarray(w2, np.float32)}
    got = worker.init_state(OPTIMIZERS["adam"], shape, host)
    for k in ("w1", "w2"):
        what = f"init_tp_state's params['{k}']"
        assert_close(received(got["values"][k], what, SHAPES[k]), host[k], what,
                     "Hint: place the given values; do not re-initialise them.")
    check_specs(shape, got, "after init_tp_state")
    check_specs(shape, worker.state_after_step(OPTIMIZERS["adam"], shape, x, y), "after one training step")
