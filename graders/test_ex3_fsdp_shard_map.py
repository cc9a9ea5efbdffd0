"""Grader for Exercise 3: FSDP written by hand with jax.shard_map.

Expected values come from a float64 NumPy forward pass and its analytic gradient; the FLOP
budget comes from the grader's own single-device JAX program. The learner's function runs on
meshes of 8, 4 and 2 of the child's 8 CPU devices.
"""

import contextlib
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from graders import hlo, jaxpr, memory
from graders.learner import fail
from graders.numeric import as_scalar, assert_close, rng

# D, H, B all distinct, so a transposed weight or a gathered axis cannot pass by accident; each
# divides by 8, 4 and 2 (every device gets whole rows); B/8 = 4 rows per device keeps them small.
D, H, B = 16, 24, 32
AXIS = "fsdp"
ROWS = P(AXIS, None)
WEIGHT_SHAPES = {"w1": (D, H), "w2": (H, D)}
# A device of an N-device mesh should do about 1/N of the single-device program's FLOPs; the
# reference does exactly 1/N, jit's own sharding ~1.05/N, and a device that computes the whole
# batch N/N. 1.5 separates the two with room on either side.
FLOP_SLACK = 1.5


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


@contextlib.contextmanager
def on_mesh(m):
    """jax.set_mesh(m), with JAX's errors about the learner's in_specs turned into advice."""
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
            fail(f"the loss made for one mesh ran bound to another ({text.split('. ')[0]}): a shard_map made "
                 "without mesh= binds to the first mesh it is called under, so one module-level shard_map "
                 "cannot serve several meshes. Hint: build a new jax.shard_map(..., mesh=mesh) inside "
                 "make_fsdp_loss(mesh) on every call, and pass it the mesh you were given.")
        raise
    except TypeError as exc:
        if "in_specs" in str(exc) and "Auto" in str(exc):
            fail("shard_map could not infer in_specs: this check runs your function on a mesh whose axis is "
                 "Auto, where they cannot be inferred. Hint: write in_specs out: "
                 "({'w1': P('fsdp', None), 'w2': P('fsdp', None)}, P('fsdp', None), P('fsdp', None)).")
        raise


def learner_loss(sol, m):
    f = sol.make_fsdp_loss(m)
    if not callable(f):
        fail(f"make_fsdp_loss(mesh) should return a function loss(p, x, y), got {type(f).__name__}.")
    return f


def spec_text(sharding) -> str:
    return str(getattr(sharding, "spec", sharding))


def sharded_by_rows(m, sharding) -> bool:
    try:
        return NamedSharding(m, ROWS).is_equivalent_to(sharding, 2)
    except (TypeError, ValueError, AttributeError):
        return False


def loss_mistakes(expected: float, n: int):
    mistakes = [(n * expected,
                 f"That is {n} times the loss: the sum of the {n} devices' local losses, because lax.psum adds "
                 "them. Hint: average across devices with lax.pmean(local, 'fsdp').")]
    if n != 8:
        mistakes.append((n * expected / 8,
                         f"That is the devices' summed local losses divided by 8, though this mesh has {n} devices. "
                         "Hint: use lax.pmean, which divides by the size of the mesh axis, never a fixed count."))
    return mistakes


def check_gradients(got, expected, n: int, where: str):
    if not isinstance(got, dict) or set(got) != set(WEIGHT_SHAPES):
        fail(f"the gradient{where} should be a dict with keys 'w1' and 'w2' like p, got {type(got).__name__}.")
    for k in ("w1", "w2"):
        mistakes = [(n * expected[k],
                     f"That is {n} times the gradient: lax.psum adds the devices' local losses instead of averaging "
                     "them. Hint: use lax.pmean(local, 'fsdp').")]
        if n != 8:
            mistakes.append((n * expected[k] / 8,
                             f"That is the gradient of the summed local losses divided by 8, though this mesh has {n} "
                             "devices. Hint: use lax.pmean, never a fixed device count."))
        assert_close(got[k], expected[k], f"gradient of {k}{where}", mistakes=mistakes)


@pytest.mark.points(2)
def test_loss_matches_single_device(sol):
    """The loss equals the single-device loss on meshes of 8, 4 and 2 devices."""
    for seed, n in ((1, 8), (2, 4), (3, 2)):
        p, x, y = problem(seed)
        m = mesh(n)
        with on_mesh(m):
            got = jax.jit(learner_loss(sol, m))(*placed(m, p, x, y))
        expected = loss_np(p, x, y)
        got = as_scalar(got, f"loss on a mesh of {n} devices")
        assert_close(got, expected, f"loss on a mesh of {n} devices", mistakes=loss_mistakes(expected, n),
                     hint="Hint: the local loss is the mean over the device's rows; lax.pmean makes it global.")


@pytest.mark.points(2)
def test_gradients_match_single_device(sol):
    """jax.grad of the loss equals the single-device gradient on meshes of 8, 4 and 2 devices."""
    for seed, n in ((4, 8), (5, 4), (6, 2)):
        p, x, y = problem(seed)
        m = mesh(n)
        with on_mesh(m):
            got = jax.jit(jax.grad(learner_loss(sol, m)))(*placed(m, p, x, y))
        check_gradients(got, grad_np(p, x, y), n, f" on a mesh of {n} devices")


@pytest.mark.points(2)
def test_weights_enter_shard_map_sharded(sol):
    """The traced loss is a shard_map, and both weights enter it as P("fsdp", None)."""
    m = mesh(8)
    with on_mesh(m):
        program = jaxpr.trace(learner_loss(sol, m), *placed(m, *problem(7)))
    maps = jaxpr.find(program, "shard_map")
    if not maps:
        seen = ", ".join(sorted(jaxpr.primitive_names(program))) or "nothing"
        fail(f"there is no shard_map in the traced loss (it holds: {seen}). Hint: write the per-device loss "
             "and wrap it in jax.shard_map(..., mesh=mesh, in_specs=..., out_specs=P()); the communication "
             "is yours to write, with lax.all_gather and lax.pmean.")
    specs = {}
    for eqn in maps:
        for var, spec in zip(eqn.invars, eqn.params["in_specs"]):
            for k, shape in WEIGHT_SHAPES.items():
                if tuple(var.aval.shape) == shape:
                    specs.setdefault(k, spec)
    if set(specs) != set(WEIGHT_SHAPES):
        fail(f"shard_map is there, but {' and '.join(sorted(set(WEIGHT_SHAPES) - set(specs)))} does not enter it "
             "as an argument. Hint: pass p itself to the shard_map'ed function, with in_specs P('fsdp', None).")
    wrong = {k: s for k, s in specs.items() if not sharded_by_rows(m, NamedSharding(m, s))}
    if wrong:
        shown = ", ".join(f"{k}: {s}" for k, s in sorted(wrong.items()))
        replicated = all(all(part is None for part in s) for s in wrong.values())
        why = ("replicated, every device stores the whole weights, so nothing is sharded" if replicated
               else "FSDP here splits each weight by rows, dim 0")
        fail(f"the weights enter shard_map as {shown}, expected P('fsdp', None): {why}. Hint: give both weights "
             "in_specs P('fsdp', None) and gather them inside the body with lax.all_gather(..., 'fsdp', tiled=True).")


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
    got = {k: grads[k].sharding for k in ("w1", "w2")}
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


@pytest.mark.points(2)
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
    """The compiled gradient holds at least 2 all-gathers (forward) and 2 reduce-scatters (backward)."""
    counts = hlo.collective_counts(compiled_gradient(sol, 8).as_text())
    gathers, scatters, reduces = counts["all-gather"], counts["reduce-scatter"], counts["all-reduce"]
    note(f"collectives in your compiled gradient: {gathers} all-gather, {scatters} reduce-scatter, {reduces} all-reduce")
    if gathers >= 2 and scatters >= 2:
        return
    found = f"the compiled gradient holds {gathers} all-gather, {scatters} reduce-scatter and {reduces} all-reduce"
    need = ("FSDP needs at least 2 all-gathers (each weight gathered in the forward pass) and at least 2 "
            "reduce-scatters (their transposes, each device receiving the summed gradient of its own rows)")
    if scatters < 2 and reduces > 0:
        why = ("the weight gradients are summed whole with an all-reduce, then sliced (what jit's own "
               "sharding compiles to on CPU, or what weights used replicated give)")
    elif gathers < 2:
        why = "the weights are not gathered"
    else:
        why = "the gradients are not scattered back to their rows"
    fail(f"{found}; {need}. Here {why}. Hint: gather each weight yourself with lax.all_gather(..., 'fsdp', "
         "tiled=True) inside jax.shard_map; jax.grad turns that gather into a reduce-scatter.")


@pytest.mark.points(1)
def test_fsdp_loss_works_under_set_mesh(sol):
    """The module-level fsdp_loss, called under jax.set_mesh of an 8-device mesh, gives the right loss and gradient."""
    f = getattr(sol, "fsdp_loss", None)
    if not callable(f):
        fail("the module has no function fsdp_loss. Hint: at module level write fsdp_loss = make_fsdp_loss(None).")
    p, x, y = problem(11)
    m = mesh(8)
    args = placed(m, p, x, y)
    with on_mesh(m):
        loss = jax.jit(f)(*args)
        grads = jax.jit(jax.grad(f))(*args)
    expected = loss_np(p, x, y)
    where = " of fsdp_loss under jax.set_mesh (8 devices)"
    assert_close(as_scalar(loss, "loss" + where), expected, "loss" + where, mistakes=loss_mistakes(expected, 8))
    check_gradients(grads, grad_np(p, x, y), 8, where)
