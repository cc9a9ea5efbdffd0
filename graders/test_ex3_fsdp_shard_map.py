"""Grader for Exercise 3: FSDP written by hand with jax.shard_map.

The checks never call the learner's code: graders/probes/ex3_fsdp_shard_map.py does, with the
inputs drawn here, and hands back plain data (losses, gradients, summaries of the traced and
compiled programs). Expected values come from a float64 NumPy forward pass and its analytic
gradient; the FLOP budget comes from the grader's own single-device JAX program. The learner's
function runs on meshes of 8, 4 and 2 of the child's 8 CPU devices.

Technique checks read the traced loss as dataflow (graders.jaxpr.dataflow, in the probe): the loss
must be the shard_map's own output, so a shard_map whose result is discarded, scaled by zero or
averaged outside earns nothing; and the program is re-run with other weights entering the
shard_map sharded, so weights used from another copy are seen by what they compute, not by their
spelling.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from graders import jaxpr, memory
from graders.learner import fail
from graders.numeric import as_scalar, assert_close, is_close, rng
from graders.probes.ex3_fsdp_shard_map import AXIS, ROWS, WEIGHTS, mesh

# D, H, B all distinct, so a transposed weight or a gathered axis cannot pass by accident; each
# divides by 8, 4 and 2 (every device gets whole rows); B/8 = 4 rows per device keeps them small.
D, H, B = 16, 24, 32
WEIGHT_SHAPES = {"w1": (D, H), "w2": (H, D)}
MESH_SIZES = (8, 4, 2)
# The program is read on 4 devices: a divisor fixed at 8 (or jax.device_count()) shows as a
# number that is not the axis size, which it would be on 8.
READ_ON = 4
# A device of an N-device mesh should do about 1/N of the single-device program's FLOPs; the
# reference does exactly 1/N, jit's own sharding ~1.05/N, and a device that computes the whole
# batch N/N. 1.5 separates the two with room on either side.
FLOP_SLACK = 1.5
PSUMS = frozenset({"psum", "psum_invariant"})  # lax.psum / lax.pmean bind one of these (check_vma on or off)


def problem(seed: int):
    r = rng(seed)
    p = {"w1": r.normal(size=(D, H)) * 0.3, "w2": r.normal(size=(H, D)) * 0.3}
    return p, r.normal(size=(B, D)), r.normal(size=(B, D))


def loss_np(p, x, y) -> float:
    return float(np.mean((np.maximum(x @ p["w1"], 0.0) @ p["w2"] - y) ** 2))


def grad_np(p, x, y) -> dict:
    """Analytic gradient of mean((relu(x w1) w2 - y)^2), in float64."""
    h = x @ p["w1"]
    a = np.maximum(h, 0.0)
    d_out = 2.0 * (a @ p["w2"] - y) / y.size
    return {"w1": x.T @ ((d_out @ p["w2"].T) * (h > 0)), "w2": a.T @ d_out}


def single_loss(p, x, y):
    return jnp.mean((jax.nn.relu(x @ p["w1"]) @ p["w2"] - y) ** 2)


@functools.cache
def single_device_gradient_flops() -> float:
    """FLOPs of the grader's own gradient program on one device, at the exercise's sizes."""
    p, x, y = problem(0)
    args = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), (p, x, y))
    return memory.flops(memory.compile_fn(jax.grad(single_loss), *args))


REBOUND_FACTORY = ("a shard_map made without mesh= binds to the first mesh it is called under, so one module-level "
                   "shard_map cannot serve several meshes. Hint: build a new jax.shard_map(..., mesh=mesh) inside "
                   "make_fsdp_loss(mesh) on every call, and pass it the mesh you were given.")
REBOUND_AT_IMPORT = ("your module was imported afresh for this mesh, yet its fsdp_loss was already bound to another "
                     "one: something at module level calls it (or builds it with a fixed mesh=). A shard_map made "
                     "without mesh= binds to the first mesh it is called under. Hint: keep only "
                     "fsdp_loss = make_fsdp_loss(None) at module level, and call it only from inside functions.")


# ---- what the probes send back --------------------------------------------------------------

def problem_message(problem: dict, rebound: str) -> str:
    """What a problem the probe met (JAX's error about the learner's shard_map, or a missing
    function) means, in the checks' words."""
    kind = problem["kind"]
    if kind == "in_specs_mismatch":
        return (f"your shard_map's in_specs do not match how the arguments arrive ({problem['text']}). "
                "w1, w2, x and y all arrive as P('fsdp', None); a weight declared P() would have to be whole "
                "on every device, which is what FSDP avoids. Hint: in_specs=({'w1': P('fsdp', None), "
                "'w2': P('fsdp', None)}, P('fsdp', None), P('fsdp', None)), and gather the weights inside "
                "with lax.all_gather(..., 'fsdp', tiled=True).")
    if kind == "rebound":
        return f"the loss made for one mesh ran bound to another ({problem['text']}): {rebound}"
    if kind == "in_specs_not_inferred":
        return ("shard_map could not infer in_specs: this check runs your function on a mesh whose axis is "
                "Auto, where they cannot be inferred. Hint: write in_specs out: "
                "({'w1': P('fsdp', None), 'w2': P('fsdp', None)}, P('fsdp', None), P('fsdp', None)).")
    if kind == "no_make_fsdp_loss":
        return ("the module has no make_fsdp_loss(mesh). The chapter asks only for fsdp_loss, but a module-level "
                "shard_map binds to the first mesh it is called under, so this package grades the loss on several "
                "meshes through make_fsdp_loss(mesh), which builds it for the mesh it is given. Hint: def "
                "make_fsdp_loss(mesh): return jax.shard_map(local_loss, mesh=mesh, in_specs=..., out_specs=P()).")
    if kind == "not_a_function":
        return f"make_fsdp_loss(mesh) should return a function loss(p, x, y), got {problem['type']}."
    if kind == "not_a_scalar":
        return (f"the loss should be a float32 scalar, replicated (out_specs=P()), got {problem['shape']}. "
                "Hint: return lax.pmean(local, 'fsdp') of the local mean loss.")
    if kind == "no_fsdp_loss":
        return "the module has no function fsdp_loss. Hint: at module level write fsdp_loss = make_fsdp_loss(None)."
    return f"could not check what your code returned: the probe reported {kind!r}."


_REPLIES: dict = {}


def ask(worker, name: str, n: int, *args, rebound: str = REBOUND_FACTORY):
    """worker.name(n, *args): the probe `name` on an n-device mesh, asked once (several checks
    read one program; each probe and mesh size always gets the same inputs), failing the check
    with the problem's meaning if the probe met one. A reply is kept only if it came back: code
    that raised is asked again by the next check, as it is run again."""
    if (name, n) not in _REPLIES:
        _REPLIES[name, n] = getattr(worker, name)(n, *args)
    reply = _REPLIES[name, n]
    if isinstance(reply, dict) and "problem" in reply:
        fail(problem_message(reply["problem"], rebound))
    return reply


def spec_of(data: dict):
    """The PartitionSpec a probe described (spec_data), rebuilt here."""
    parts = [P.UNCONSTRAINED if isinstance(part, dict) else part for part in data["parts"]]
    try:
        return P(*parts, unreduced=set(data["unreduced"]), reduced=set(data["reduced"]))
    except (TypeError, ValueError):
        return None


def sharded_by_rows(m, spec) -> bool:
    if spec is None:
        return False
    try:
        return NamedSharding(m, ROWS).is_equivalent_to(NamedSharding(m, spec), 2)
    except (TypeError, ValueError, AttributeError):
        return False


def holds_rows(m, layout: dict, shape) -> bool:
    """Whether an array laid out as the probe described (sharding_data) sits on m as P("fsdp", None)
    would put it: the same rows on the same devices, in the same memory."""
    expected = NamedSharding(m, ROWS)
    rows = sorted([device.id, [list(s.indices(n)) for s, n in zip(index, shape)]]
                  for device, index in expected.devices_indices_map(tuple(shape)).items())
    return layout["rows"] == rows and layout["memory_kind"] == expected.memory_kind


def is_replicated(parts) -> bool:
    return all(part is None for part in parts)


def loss_mistakes(expected: float, n: int):
    mistakes = [(n * expected,
                 f"That is {n} times the loss: the sum of the {n} devices' local losses, because lax.psum adds "
                 "them. Hint: average across devices with lax.pmean(local, 'fsdp').")]
    for k in sorted({8, jax.device_count()} - {n}):
        mistakes.append((n * expected / k,
                         f"That is the devices' summed local losses divided by {k} (a fixed count, or "
                         f"jax.device_count()), though this mesh has {n} devices. Hint: use lax.pmean, which "
                         "divides by the size of the mesh axis."))
    return mistakes


def check_gradients(reply, expected, n: int, where: str):
    got = reply["grads"]
    if not isinstance(got, dict) or set(got) != set(WEIGHT_SHAPES):
        fail(f"the gradient{where} should be a dict with keys 'w1' and 'w2' like p, got {reply['type']}.")
    for k in WEIGHTS:
        mistakes = [(n * expected[k],
                     f"That is {n} times the gradient: lax.psum adds the devices' local losses instead of averaging "
                     "them. Hint: use lax.pmean(local, 'fsdp').")]
        for c in sorted({8, jax.device_count()} - {n}):
            mistakes.append((n * expected[k] / c,
                             f"That is the gradient of the summed local losses divided by {c}, though this mesh has "
                             f"{n} devices. Hint: use lax.pmean, never a fixed or global device count."))
        assert_close(got[k], expected[k], f"gradient of {k}{where}", mistakes=mistakes)


# ---- reading the traced loss -------------------------------------------------------------

def traced(worker):
    """The probe's summary of make_fsdp_loss(mesh) traced on READ_ON devices at problem(7)."""
    read = ask(worker, "read_loss", READ_ON, *problem(7))
    if read["outputs"] != 1:
        fail(f"the loss should return one scalar, got {read['outputs']} values.")
    return read


def loss_shard_map(worker):
    """The summary of the traced loss, if the loss is a shard_map's own output: the loss must
    leave the shard_map as it is, so nothing outside it (a mean, a `* 0`, another program) counts."""
    read = traced(worker)
    if read["is_shard_map"]:
        return read
    if not read["shard_maps"]:
        seen = ", ".join(sorted({jaxpr.said(name) for name in read["primitives"]})) or "nothing"
        fail(f"there is no shard_map in the traced loss (it holds: {seen}): jit's own sharding computes it, not "
             "your shard_map. Hint: write the per-device loss and wrap it in jax.shard_map(..., mesh=mesh, "
             "in_specs=..., out_specs=P()); the communication is yours to write, with lax.all_gather and lax.pmean.")
    if not read["upstream"]:
        fail(f"your loss holds a shard_map, but its result is discarded: the loss is made by {read['made_by']} "
             "from other values. Hint: return the shard_map's result itself as the loss.")
    specs = read["upstream_out_specs"]
    if any(not is_replicated(s["parts"]) for s in specs):
        fail(f"the shard_map returns per-device values (out_specs {', '.join(s['text'] for s in specs)}) and the loss "
             f"is made from them outside it, by {read['made_by']}: the averaging across devices is left to jit. "
             "Hint: average inside the shard_map with lax.pmean(local, 'fsdp') and use out_specs=P().")
    fail(f"the loss is not the shard_map's own result: {read['made_by']} outside the shard_map makes it from that "
         "result (and perhaps other values), so the shard_map may not be what computes it. Hint: return the "
         "shard_map's result itself as the loss: the lax.pmean inside it already makes it global.")


# ---- checks ------------------------------------------------------------------------------

def value_and_grad(worker, n: int):
    """(problem, the probe's loss and gradient) of make_fsdp_loss(mesh) on an n-device mesh: one
    compiled program serves both the loss check and the gradient check."""
    problem_n = problem(n)
    return problem_n, ask(worker, "value_and_grad", n, *problem_n)


@pytest.mark.points(1)
def test_loss_matches_single_device(worker):
    """The loss equals the single-device loss on meshes of 8, 4 and 2 devices."""
    for n in MESH_SIZES:
        (p, x, y), reply = value_and_grad(worker, n)
        expected = loss_np(p, x, y)
        got = as_scalar(reply["loss"], f"loss on a mesh of {n} devices")
        assert_close(got, expected, f"loss on a mesh of {n} devices", mistakes=loss_mistakes(expected, n),
                     hint="Hint: the local loss is the mean over the device's rows; lax.pmean makes it global.")


@pytest.mark.points(1)
def test_gradients_match_single_device(worker):
    """jax.grad of the loss equals the single-device gradient on meshes of 8, 4 and 2 devices."""
    for n in MESH_SIZES:
        (p, x, y), reply = value_and_grad(worker, n)
        check_gradients(reply, grad_np(p, x, y), n, f" on a mesh of {n} devices")


@pytest.mark.points(1)
def test_loss_is_a_pmean_out_of_shard_map(worker):
    """The loss is the shard_map's own output, out_specs P(), made inside by lax.pmean over "fsdp"."""
    read = loss_shard_map(worker)
    spec = read["out_spec"]
    if not is_replicated(spec["parts"]):
        fail(f"the shard_map gives the loss with out_specs {spec['text']}; expected P(): after lax.pmean every device "
             "holds the same global loss. Hint: out_specs=P().")
    made = read["body"]
    where = "inside the shard_map, the loss"
    if made["primitive"] in PSUMS:
        fail(f"{where} is a lax.psum over the devices with no division: the sum of the {READ_ON} devices' local "
             f"losses, {READ_ON} times too large. Hint: lax.pmean(local, 'fsdp') averages them.")
    if made["primitive"] != "div" or made["first_parent"] not in PSUMS:
        fail(f"{where} comes from {made['made_by']}, not from lax.pmean(local, 'fsdp') (a psum over the axis "
             "divided by its size). Hint: compute the local mean loss on the device's rows and return "
             "lax.pmean(local, 'fsdp').")
    axes = tuple(made["psum_axes"])
    if axes != (AXIS,):
        fail(f"{where} is averaged over the axes {axes}, expected ('fsdp',): the mean must run over the devices "
             "that hold the batch. Hint: lax.pmean(local, 'fsdp').")
    divisor = made["divisor"]
    if divisor is None or not is_close(np.asarray(divisor, np.float64), READ_ON):
        shown = "a computed value" if divisor is None else f"{float(np.asarray(divisor)):g}"
        fail(f"{where} is a psum over 'fsdp' divided by {shown}, though on this mesh the axis has {READ_ON} "
             "devices (a fixed count, or jax.device_count(), is right on one mesh only). "
             "Hint: lax.pmean(local, 'fsdp') divides by the axis size.")


# The heart of FSDP, and the one check a shard_map that computes from replicated weights beside
# decoy gathers cannot pass: weighted so that such a solution keeps at most half the points.
@pytest.mark.points(4)
def test_loss_is_computed_from_gathered_shards(worker):
    """w1 and w2 enter that shard_map as P("fsdp", None), are all_gathered inside, and the loss is computed from them."""
    read = loss_shard_map(worker)
    p, x, y = problem(7)
    m = mesh(READ_ON)
    entering = read["entering"]
    fed = {}
    for i, k in enumerate(WEIGHTS):
        fed[k] = [j for j, e in enumerate(entering) if e["input"] == i]
        if not fed[k]:
            made = [e for e in entering if e["made_by"] is not None and tuple(e["shape"]) == WEIGHT_SHAPES[k]]
            how = f" (what enters is made by {made[0]['made_by']} first)" if made else ""
            fail(f"p['{k}'] does not enter the shard_map as it arrives{how}: FSDP keeps each weight split by rows "
                 "and lets shard_map hand each device its slice. Hint: pass p itself, with in_specs "
                 "{'w1': P('fsdp', None), 'w2': P('fsdp', None)}.")
        specs = [entering[j]["in_spec"] for j in fed[k]]
        wrong = [s for s in specs if not sharded_by_rows(m, spec_of(s))]
        if wrong:
            why = ("replicated: every device would store the whole weight, so nothing is sharded"
                   if is_replicated(wrong[0]["parts"]) else "FSDP here splits each weight by rows, dim 0")
            fail(f"p['{k}'] enters shard_map as {wrong[0]['text']}, expected P('fsdp', None): {why}. Hint: give both "
                 "weights in_specs P('fsdp', None) and gather them inside the body with "
                 "lax.all_gather(..., 'fsdp', tiled=True).")
        gathers = [g for g in read["gathers"] if g["input"] in fed[k]]
        if not gathers:
            fail(f"p['{k}'] enters the shard_map split by rows, but no lax.all_gather of it leads to the loss: "
                 "each device must gather the whole weight before using it. Hint: "
                 f"{k} = lax.all_gather(p_blk['{k}'], 'fsdp', tiled=True) inside the body, and use that {k}.")
        params = gathers[0]["params"]
        if tuple(params.get("axis_name", ())) != (AXIS,) or not params.get("tiled") or params.get("all_gather_dimension"):
            fail(f"p['{k}'] is gathered with axis_name={params.get('axis_name')}, tiled={params.get('tiled')}, "
                 f"axis={params.get('all_gather_dimension')}; expected the rows gathered back into the whole weight. "
                 f"Hint: lax.all_gather(p_blk['{k}'], 'fsdp', tiled=True).")
    # Re-run the traced program with other weights entering the shard_map sharded, everything
    # else as it was: a loss computed from those shards follows them; one from another copy does not.
    other = problem(17)[0]
    positions = {j: i for i, k in enumerate(WEIGHTS) for j in fed[k]}
    got = ask(worker, "swapped_loss", READ_ON, p, x, y, positions, other)
    got = as_scalar(got, "the loss with other weights entering the shard_map")
    expected = loss_np(other, x, y)
    if is_close(got, expected):
        return
    if is_close(got, loss_np(p, x, y)):
        fail(f"with other weights entering the shard_map as P('fsdp', None), your loss stays {got:.6g} (the old "
             f"weights' loss) instead of {expected:.6g}: it is computed from another copy of the weights (replicated, "
             "or taken from outside the shard_map), and the gathered shards do no work. Hint: compute the loss from "
             "lax.all_gather(p_blk[...], 'fsdp', tiled=True) of the shard_map's own weight arguments.")
    fail(f"with other weights entering the shard_map as P('fsdp', None), your loss is {got:.6g}, but those weights' "
         f"loss is {expected:.6g}: the loss is not computed from the gathered shards alone. Hint: compute the whole "
         "loss from lax.all_gather(p_blk[...], 'fsdp', tiled=True) of the shard_map's own weight arguments.")


@pytest.mark.points(1)
def test_gradients_stay_sharded(worker):
    """Both gradients come out as P("fsdp", None), on a mesh whose axis is Auto."""
    # On an Explicit mesh a gradient's sharding is its parameter's type, P("fsdp", None) whatever
    # the program did; on an Auto mesh it is what the compiled program actually produces.
    n = 8
    reply = ask(worker, "gradient_layout", n, *problem(8))
    if reply["keys"] is None or set(reply["keys"]) != set(WEIGHT_SHAPES):
        fail(f"the gradient should be a dict with keys 'w1' and 'w2' like p, got {reply['type']}.")
    got = reply["layout"]
    m = mesh(n, auto=True)
    if not all(holds_rows(m, got[k], WEIGHT_SHAPES[k]) for k in WEIGHTS):
        fail(f"the gradients come out as w1: {got['w1']['spec']}, w2: {got['w2']['spec']}; expected "
             "P('fsdp', None) for both, each device holding the gradient of its own rows. Whole gradients on "
             "every device mean the weights were used replicated, not sharded. Hint: take the weights in as "
             "P('fsdp', None) and lax.all_gather them inside shard_map: the transpose of that gather is a "
             "reduce-scatter that hands each device its slice.")


def compiled_gradient(worker, n: int):
    """The probe's figures for jit(grad) of the learner's loss on an n-device mesh, compiled once
    for the FLOP and HLO checks."""
    return ask(worker, "compiled_gradient", n, *problem(9))


@pytest.mark.points(1)
def test_each_device_does_its_share_of_the_work(worker, note):
    """Per-device FLOPs of the compiled gradient on 8 devices are about 1/8 of the single-device program's."""
    n = 8
    got = float(compiled_gradient(worker, n)["flops"])
    single = single_device_gradient_flops()
    share = single / n
    note(f"per-device FLOPs of your compiled gradient on {n} devices: {got:,.0f} "
         f"(single device: {single:,.0f}; a 1/{n} share: {share:,.0f})")
    # `not >=`, so that a figure that is not a number (NaN) is wrong too: no program that computes
    # the whole gradient, split over n devices, does much less than its share on each
    if not got >= share / FLOP_SLACK:
        fail(f"each device does {got:,.0f} FLOPs in the compiled gradient; the single-device program does "
             f"{single:,.0f}, so a device's share on {n} devices is about {share:,.0f}. Yours is less than "
             f"1/{FLOP_SLACK:g} of that: no compiled gradient of the whole batch does so little on each device.")
    if got > FLOP_SLACK * share:
        why = ("every device computes on the whole batch, as if alone" if got >= 0.8 * single
               else "each device does more than its part")
        fail(f"each device does {got:,.0f} FLOPs in the compiled gradient; the single-device program does "
             f"{single:,.0f}, so a device's share on {n} devices is about {share:,.0f}. Yours is {got / share:.1f} "
             f"times that: {why}. Hint: keep the batch sharded, so each device computes the loss on its own "
             "B/N rows; gather only the weights.")


@pytest.mark.points(2)
def test_gradient_all_gathers_and_reduce_scatters(worker, note):
    """The compiled gradient gathers both weights (>= 2 all-gathers) and reduce-scatters their gradients, never all-reducing one whole."""
    compiled = compiled_gradient(worker, 8)
    counts = compiled["collectives"]
    gathers, scatters, reduces = counts["all-gather"], counts["reduce-scatter"], counts["all-reduce"]
    # A whole weight gradient summed on every device: the signature of weights used replicated.
    whole = [s for s in compiled["all_reduce_sizes"] if s >= min(D * H, H * D)]
    note(f"collectives in your compiled gradient: {gathers} all-gather, {scatters} reduce-scatter, {reduces} all-reduce")
    if gathers >= 2 and scatters >= 2 and not whole:
        return
    found = f"the compiled gradient holds {gathers} all-gather, {scatters} reduce-scatter and {reduces} all-reduce"
    need = ("FSDP needs at least 2 all-gathers (each weight gathered in the forward pass) and at least 2 "
            "reduce-scatters (their transposes, each device receiving the summed gradient of its own rows), "
            "and no weight gradient summed whole")
    if whole:
        why = (f"{len(whole)} all-reduce(s) of {max(whole)} elements sum a whole weight gradient on every device, "
               "then slice it (what jit's own sharding compiles to on CPU, or what weights used replicated give)")
    elif gathers < 2:
        why = "the weights are not gathered"
    else:
        why = "the gradients are not scattered back to their rows"
    fail(f"{found}; {need}. Here {why}. Hint: gather each weight yourself with lax.all_gather(..., 'fsdp', "
         "tiled=True) inside jax.shard_map and compute only from that; jax.grad turns the gather into a reduce-scatter.")


@pytest.mark.points(1)
def test_fsdp_loss_is_a_shard_map_right_on_every_mesh(worker):
    """The module-level fsdp_loss, under jax.set_mesh of 8, 4 and 2 devices, is a shard_map giving the right loss and gradient."""
    for seed, n in zip((11, 12, 13), MESH_SIZES):
        p, x, y = problem(seed)
        reply = ask(worker, "fresh_fsdp_loss_on_mesh", n, p, x, y, rebound=REBOUND_AT_IMPORT)
        where = f" of fsdp_loss under jax.set_mesh ({n} devices)"
        if not reply["is_shard_map"]:
            fail(f"the loss{where} is made by {reply['made_by']}, not by a shard_map: fsdp_loss must be the chapter's "
                 "shard_map FSDP loss itself. Hint: at module level write fsdp_loss = make_fsdp_loss(None).")
        expected = loss_np(p, x, y)
        assert_close(as_scalar(reply["loss"], "loss" + where), expected, "loss" + where,
                     mistakes=loss_mistakes(expected, n))
        check_gradients(reply, grad_np(p, x, y), n, where)
