"""Grader for Exercise 3: FSDP written by hand with jax.shard_map.

Expected values come from a float64 NumPy forward pass and its analytic gradient; the FLOP
budget comes from the grader's own single-device JAX program. The learner's function runs on
meshes of 8, 4 and 2 of the child's 8 CPU devices.

Technique checks read the traced loss as dataflow (graders.jaxpr.dataflow): the loss must be the
shard_map's own output, so a shard_map whose result is discarded, scaled by zero or averaged
outside earns nothing; and the program is re-run with other weights entering the shard_map
sharded, so weights used from another copy are seen by what they compute, not by their spelling.
"""

import contextlib
import functools
import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from graders import hlo, jaxpr, memory
from graders.learner import fail
from graders.numeric import as_scalar, assert_close, is_close, rng

# D, H, B all distinct, so a transposed weight or a gathered axis cannot pass by accident; each
# divides by 8, 4 and 2 (every device gets whole rows); B/8 = 4 rows per device keeps them small.
D, H, B = 16, 24, 32
AXIS = "fsdp"
ROWS = P(AXIS, None)
WEIGHT_SHAPES = {"w1": (D, H), "w2": (H, D)}
WEIGHTS = ("w1", "w2")  # p's leaves in jax's flattening order: the traced loss's first two inputs
MESH_SIZES = (8, 4, 2)
# The program is read on 4 devices: a divisor fixed at 8 (or jax.device_count()) shows as a
# number that is not the axis size, which it would be on 8.
READ_ON = 4
# A device of an N-device mesh should do about 1/N of the single-device program's FLOPs; the
# reference does exactly 1/N, jit's own sharding ~1.05/N, and a device that computes the whole
# batch N/N. 1.5 separates the two with room on either side.
FLOP_SLACK = 1.5
PSUMS = frozenset({"psum", "psum_invariant"})  # lax.psum / lax.pmean bind one of these (check_vma on or off)


@functools.cache
def mesh(n: int, auto: bool = False):
    """A 1-D mesh named "fsdp" over the first n devices (Explicit axes, 0.12's default)."""
    kind = AxisType.Auto if auto else AxisType.Explicit
    return jax.make_mesh((n,), (AXIS,), axis_types=(kind,), devices=jax.devices()[:n])


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


def placed(m, p, x, y):
    """float32 copies of the inputs, every one split by rows across the mesh: P("fsdp", None)."""
    rows = NamedSharding(m, ROWS)
    put = lambda a: jax.device_put(np.asarray(a, np.float32), rows)  # noqa: E731
    return {k: put(v) for k, v in p.items()}, put(x), put(y)


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


@contextlib.contextmanager
def on_mesh(m, rebound: str = REBOUND_FACTORY):
    """jax.set_mesh(m), with JAX's errors about the learner's shard_map turned into advice."""
    try:
        with jax.set_mesh(m):
            yield
    except ValueError as exc:
        text = str(exc)
        if "in_specs passed to shard_map" in text and "does not match" in text:
            fail(f"your shard_map's in_specs do not match how the arguments arrive ({text.split('. ')[0]}). "
                 "w1, w2, x and y all arrive as P('fsdp', None); a weight declared P() would have to be whole "
                 "on every device, which is what FSDP avoids. Hint: in_specs=({'w1': P('fsdp', None), "
                 "'w2': P('fsdp', None)}, P('fsdp', None), P('fsdp', None)), and gather the weights inside "
                 "with lax.all_gather(..., 'fsdp', tiled=True).")
        if "should match the mesh passed to shard_map" in text:
            fail(f"the loss made for one mesh ran bound to another ({text.split('. ')[0]}): {rebound}")
        raise
    except TypeError as exc:
        if "in_specs" in str(exc) and "Auto" in str(exc):
            fail("shard_map could not infer in_specs: this check runs your function on a mesh whose axis is "
                 "Auto, where they cannot be inferred. Hint: write in_specs out: "
                 "({'w1': P('fsdp', None), 'w2': P('fsdp', None)}, P('fsdp', None), P('fsdp', None)).")
        raise


def learner_loss(sol, m):
    factory = getattr(sol, "make_fsdp_loss", None)
    if not callable(factory):
        fail("the module has no make_fsdp_loss(mesh). The chapter asks only for fsdp_loss, but a module-level "
             "shard_map binds to the first mesh it is called under, so this package grades the loss on several "
             "meshes through make_fsdp_loss(mesh), which builds it for the mesh it is given. Hint: def "
             "make_fsdp_loss(mesh): return jax.shard_map(local_loss, mesh=mesh, in_specs=..., out_specs=P()).")
    f = factory(m)
    if not callable(f):
        fail(f"make_fsdp_loss(mesh) should return a function loss(p, x, y), got {type(f).__name__}.")
    return f


def fresh_fsdp_loss(sol):
    """The module-level fsdp_loss of a fresh import of the learner's file: a shard_map made without
    mesh= binds to the first mesh it meets, so each mesh gets a module of its own, as a program
    that sets one mesh and then imports the module would."""
    spec = importlib.util.spec_from_file_location(f"{sol.__name__}_fresh", sol.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    f = getattr(module, "fsdp_loss", None)
    if not callable(f):
        fail("the module has no function fsdp_loss. Hint: at module level write fsdp_loss = make_fsdp_loss(None).")
    return f


def spec_text(sharding) -> str:
    return str(getattr(sharding, "spec", sharding))


def sharded_by_rows(m, sharding) -> bool:
    try:
        return NamedSharding(m, ROWS).is_equivalent_to(sharding, 2)
    except (TypeError, ValueError, AttributeError):
        return False


def is_replicated(spec) -> bool:
    return all(part is None for part in spec)


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


def check_gradients(got, expected, n: int, where: str):
    if not isinstance(got, dict) or set(got) != set(WEIGHT_SHAPES):
        fail(f"the gradient{where} should be a dict with keys 'w1' and 'w2' like p, got {type(got).__name__}.")
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

@functools.cache
def traced(sol, n: int = READ_ON):
    """(jaxpr of make_fsdp_loss(mesh) at the problem's inputs, its inputs as dataflow Values,
    its one output as a Value, the numpy problem, the placed arguments)."""
    m = mesh(n)
    p, x, y = problem(7)
    args = placed(m, p, x, y)
    with on_mesh(m):
        closed = jax.make_jaxpr(learner_loss(sol, m))(*args)
    inputs, outputs = jaxpr.dataflow(closed.jaxpr, closed.consts)
    if len(outputs) != 1:
        fail(f"the loss should return one scalar, got {len(outputs)} values.")
    return closed, inputs, outputs[0], (p, x, y), args


def primitive(value) -> str:
    return "a constant" if value.eqn is None else f"`{value.eqn.primitive.name}`"


def loss_shard_map(sol):
    """The shard_map equation whose output is the loss, and which of its outputs: the loss must
    leave the shard_map as it is, so nothing outside it (a mean, a `* 0`, another program) counts."""
    closed, _, out, _, _ = traced(sol)
    if out.eqn is not None and jaxpr.is_a(out.eqn, "shard_map"):
        return out.eqn, out.index
    maps = jaxpr.find(closed.jaxpr, "shard_map")
    if not maps:
        seen = ", ".join(sorted(jaxpr.primitive_names(closed.jaxpr))) or "nothing"
        fail(f"there is no shard_map in the traced loss (it holds: {seen}): jit's own sharding computes it, not "
             "your shard_map. Hint: write the per-device loss and wrap it in jax.shard_map(..., mesh=mesh, "
             "in_specs=..., out_specs=P()); the communication is yours to write, with lax.all_gather and lax.pmean.")
    upstream = [v for v in jaxpr.ancestors(out) if v.eqn is not None and jaxpr.is_a(v.eqn, "shard_map")]
    if not upstream:
        fail(f"your loss holds a shard_map, but its result is discarded: the loss is made by {primitive(out)} "
             "from other values. Hint: return the shard_map's result itself as the loss.")
    specs = [s for e in {id(v.eqn): v.eqn for v in upstream}.values() for s in e.params["out_specs"]]
    if any(not is_replicated(s) for s in specs):
        fail(f"the shard_map returns per-device values (out_specs {', '.join(map(str, specs))}) and the loss is made "
             f"from them outside it, by {primitive(out)}: the averaging across devices is left to jit. "
             "Hint: average inside the shard_map with lax.pmean(local, 'fsdp') and use out_specs=P().")
    fail(f"the loss is not the shard_map's own result: {primitive(out)} outside the shard_map makes it from that result "
         "(and perhaps other values), so the shard_map may not be what computes it. Hint: return the shard_map's "
         "result itself as the loss: the lax.pmean inside it already makes it global.")


def body_of(smap):
    body = smap.params["jaxpr"]
    inner = getattr(body, "jaxpr", body)
    return jaxpr.dataflow(inner, getattr(body, "consts", ()))


# ---- checks ------------------------------------------------------------------------------

@functools.cache
def value_and_grad(sol, n: int):
    """(problem, loss, gradient) of make_fsdp_loss(mesh) on an n-device mesh: one compiled program
    serves both the loss check and the gradient check."""
    problem_n = problem(n)
    m = mesh(n)
    args = placed(m, *problem_n)
    with on_mesh(m):
        f = learner_loss(sol, m)
        shape = jax.eval_shape(f, *args)
        if getattr(shape, "shape", None) != ():
            fail(f"the loss should be a float32 scalar, replicated (out_specs=P()), got {shape}. "
                 "Hint: return lax.pmean(local, 'fsdp') of the local mean loss.")
        loss, grads = jax.jit(jax.value_and_grad(f))(*args)
    return problem_n, loss, grads


@pytest.mark.points(1)
def test_loss_matches_single_device(sol):
    """The loss equals the single-device loss on meshes of 8, 4 and 2 devices."""
    for n in MESH_SIZES:
        (p, x, y), got, _ = value_and_grad(sol, n)
        expected = loss_np(p, x, y)
        got = as_scalar(got, f"loss on a mesh of {n} devices")
        assert_close(got, expected, f"loss on a mesh of {n} devices", mistakes=loss_mistakes(expected, n),
                     hint="Hint: the local loss is the mean over the device's rows; lax.pmean makes it global.")


@pytest.mark.points(1)
def test_gradients_match_single_device(sol):
    """jax.grad of the loss equals the single-device gradient on meshes of 8, 4 and 2 devices."""
    for n in MESH_SIZES:
        (p, x, y), _, got = value_and_grad(sol, n)
        check_gradients(got, grad_np(p, x, y), n, f" on a mesh of {n} devices")


@pytest.mark.points(1)
def test_loss_is_a_pmean_out_of_shard_map(sol):
    """The loss is the shard_map's own output, out_specs P(), made inside by lax.pmean over "fsdp"."""
    smap, index = loss_shard_map(sol)
    spec = smap.params["out_specs"][index]
    if not is_replicated(spec):
        fail(f"the shard_map gives the loss with out_specs {spec}; expected P(): after lax.pmean every device holds "
             "the same global loss. Hint: out_specs=P().")
    _, outputs = body_of(smap)
    made = outputs[index]
    where = "inside the shard_map, the loss"
    if made.eqn is not None and made.eqn.primitive.name in PSUMS:
        fail(f"{where} is a lax.psum over the devices with no division: the sum of the {READ_ON} devices' local "
             f"losses, {READ_ON} times too large. Hint: lax.pmean(local, 'fsdp') averages them.")
    if made.eqn is None or made.eqn.primitive.name != "div" or made.parents[0].eqn is None \
            or made.parents[0].eqn.primitive.name not in PSUMS:
        fail(f"{where} comes from {primitive(made)}, not from lax.pmean(local, 'fsdp') (a psum over the axis "
             "divided by its size). Hint: compute the local mean loss on the device's rows and return "
             "lax.pmean(local, 'fsdp').")
    axes = tuple(made.parents[0].eqn.params.get("axes", ()))
    if axes != (AXIS,):
        fail(f"{where} is averaged over the axes {axes}, expected ('fsdp',): the mean must run over the devices "
             "that hold the batch. Hint: lax.pmean(local, 'fsdp').")
    divisor = made.parents[1].const
    if divisor is None or not is_close(np.asarray(divisor, np.float64), READ_ON):
        shown = "a computed value" if divisor is None else f"{float(np.asarray(divisor)):g}"
        fail(f"{where} is a psum over 'fsdp' divided by {shown}, though on this mesh the axis has {READ_ON} "
             "devices (a fixed count, or jax.device_count(), is right on one mesh only). "
             "Hint: lax.pmean(local, 'fsdp') divides by the axis size.")


# The heart of FSDP, and the one check a shard_map that computes from replicated weights beside
# decoy gathers cannot pass: weighted so that such a solution keeps at most half the points.
@pytest.mark.points(4)
def test_loss_is_computed_from_gathered_shards(sol):
    """w1 and w2 enter that shard_map as P("fsdp", None), are all_gathered inside, and the loss is computed from them."""
    smap, index = loss_shard_map(sol)
    closed, inputs, out, (p, x, y), args = traced(sol)
    m = mesh(READ_ON)
    body_inputs, body_outputs = body_of(smap)
    live = jaxpr.ancestors(body_outputs[index])
    fed = {}
    for i, k in enumerate(WEIGHTS):
        fed[k] = [j for j, v in enumerate(out.parents) if v is inputs[i]]
        if not fed[k]:
            made = [v for v in out.parents if v.eqn is not None and tuple(smap.invars[out.parents.index(v)].aval.shape)
                    == WEIGHT_SHAPES[k]]
            how = f" (what enters is made by {primitive(made[0])} first)" if made else ""
            fail(f"p['{k}'] does not enter the shard_map as it arrives{how}: FSDP keeps each weight split by rows "
                 "and lets shard_map hand each device its slice. Hint: pass p itself, with in_specs "
                 "{'w1': P('fsdp', None), 'w2': P('fsdp', None)}.")
        specs = [smap.params["in_specs"][j] for j in fed[k]]
        wrong = [s for s in specs if not sharded_by_rows(m, NamedSharding(m, s))]
        if wrong:
            why = ("replicated: every device would store the whole weight, so nothing is sharded"
                   if is_replicated(wrong[0]) else "FSDP here splits each weight by rows, dim 0")
            fail(f"p['{k}'] enters shard_map as {wrong[0]}, expected P('fsdp', None): {why}. Hint: give both weights "
                 "in_specs P('fsdp', None) and gather them inside the body with lax.all_gather(..., 'fsdp', tiled=True).")
        gathers = [v for v in live if v.eqn is not None and v.eqn.primitive.name == "all_gather"
                   and any(v.parents[0] is body_inputs[j] for j in fed[k])]
        if not gathers:
            fail(f"p['{k}'] enters the shard_map split by rows, but no lax.all_gather of it leads to the loss: "
                 "each device must gather the whole weight before using it. Hint: "
                 f"{k} = lax.all_gather(p_blk['{k}'], 'fsdp', tiled=True) inside the body, and use that {k}.")
        params = gathers[0].eqn.params
        if tuple(params.get("axis_name", ())) != (AXIS,) or not params.get("tiled") or params.get("all_gather_dimension"):
            fail(f"p['{k}'] is gathered with axis_name={params.get('axis_name')}, tiled={params.get('tiled')}, "
                 f"axis={params.get('all_gather_dimension')}; expected the rows gathered back into the whole weight. "
                 f"Hint: lax.all_gather(p_blk['{k}'], 'fsdp', tiled=True).")
    # Re-run the traced program with other weights entering the shard_map sharded, everything
    # else as it was: a loss computed from those shards follows them; one from another copy does not.
    other = problem(17)[0]
    swap = placed(m, other, x, y)[0]
    positions = {j: i for i, k in enumerate(WEIGHTS) for j in fed[k]}

    def apply(eqn, ins, new):
        if eqn is smap:
            ins = [new[positions[j]] if j in positions else v for j, v in enumerate(ins)]
        return jaxpr.bind(eqn, ins)

    flat = jax.tree.leaves(args)
    with on_mesh(m):
        got = jax.jit(lambda a, new: jaxpr.evaluate(closed.jaxpr, closed.consts, a,
                                                    lambda e, i: apply(e, i, new))[0])(flat, [swap[k] for k in WEIGHTS])
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
def test_gradients_stay_sharded(sol):
    """Both gradients come out as P("fsdp", None), on a mesh whose axis is Auto."""
    # On an Explicit mesh a gradient's sharding is its parameter's type, P("fsdp", None) whatever
    # the program did; on an Auto mesh it is what the compiled program actually produces.
    m = mesh(8, auto=True)
    with on_mesh(m):
        grads = jax.jit(jax.grad(learner_loss(sol, m)))(*placed(m, *problem(8)))
    if not isinstance(grads, dict) or set(grads) != set(WEIGHT_SHAPES):
        fail(f"the gradient should be a dict with keys 'w1' and 'w2' like p, got {type(grads).__name__}.")
    got = {k: grads[k].sharding for k in WEIGHTS}
    if not all(sharded_by_rows(m, s) for s in got.values()):
        fail(f"the gradients come out as w1: {spec_text(got['w1'])}, w2: {spec_text(got['w2'])}; expected "
             "P('fsdp', None) for both, each device holding the gradient of its own rows. Whole gradients on "
             "every device mean the weights were used replicated, not sharded. Hint: take the weights in as "
             "P('fsdp', None) and lax.all_gather them inside shard_map: the transpose of that gather is a "
             "reduce-scatter that hands each device its slice.")


@functools.cache
def compiled_gradient(sol, n: int):
    """jit(grad) of the learner's loss on an n-device mesh, compiled once for the FLOP and HLO checks."""
    m = mesh(n)
    with on_mesh(m):
        return jax.jit(jax.grad(learner_loss(sol, m))).lower(*placed(m, *problem(9))).compile()


@pytest.mark.points(1)
def test_each_device_does_its_share_of_the_work(sol, note):
    """Per-device FLOPs of the compiled gradient on 8 devices are about 1/8 of the single-device program's."""
    n = 8
    got = memory.flops(compiled_gradient(sol, n))
    single = single_device_gradient_flops()
    share = single / n
    note(f"per-device FLOPs of your compiled gradient on {n} devices: {got:,.0f} "
         f"(single device: {single:,.0f}; a 1/{n} share: {share:,.0f})")
    if got > FLOP_SLACK * share:
        why = ("every device computes on the whole batch, as if alone" if got >= 0.8 * single
               else "each device does more than its part")
        fail(f"each device does {got:,.0f} FLOPs in the compiled gradient; the single-device program does "
             f"{single:,.0f}, so a device's share on {n} devices is about {share:,.0f}. Yours is {got / share:.1f} "
             f"times that: {why}. Hint: keep the batch sharded, so each device computes the loss on its own "
             "B/N rows; gather only the weights.")


@pytest.mark.points(2)
def test_gradient_all_gathers_and_reduce_scatters(sol, note):
    """The compiled gradient gathers both weights (>= 2 all-gathers) and reduce-scatters their gradients, never all-reducing one whole."""
    text = compiled_gradient(sol, 8).as_text()
    counts = hlo.collective_counts(text)
    gathers, scatters, reduces = counts["all-gather"], counts["reduce-scatter"], counts["all-reduce"]
    # A whole weight gradient summed on every device: the signature of weights used replicated.
    whole = [s for s in hlo.collective_sizes(text, "all-reduce") if s >= min(D * H, H * D)]
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
def test_fsdp_loss_is_a_shard_map_right_on_every_mesh(sol):
    """The module-level fsdp_loss, under jax.set_mesh of 8, 4 and 2 devices, is a shard_map giving the right loss and gradient."""
    for seed, n in zip((11, 12, 13), MESH_SIZES):
        f = fresh_fsdp_loss(sol)
        p, x, y = problem(seed)
        m = mesh(n)
        args = placed(m, p, x, y)
        where = f" of fsdp_loss under jax.set_mesh ({n} devices)"
        with on_mesh(m, rebound=REBOUND_AT_IMPORT):
            program = jaxpr.trace(f, *args)
            loss, grads = jax.jit(jax.value_and_grad(f))(*args)
        _, (out,) = jaxpr.dataflow(program)
        if out.eqn is None or not jaxpr.is_a(out.eqn, "shard_map"):
            fail(f"the loss{where} is made by {primitive(out)}, not by a shard_map: fsdp_loss must be the chapter's "
                 "shard_map FSDP loss itself. Hint: at module level write fsdp_loss = make_fsdp_loss(None).")
        expected = loss_np(p, x, y)
        assert_close(as_scalar(loss, "loss" + where), expected, "loss" + where, mistakes=loss_mistakes(expected, n))
        check_gradients(grads, grad_np(p, x, y), n, where)
