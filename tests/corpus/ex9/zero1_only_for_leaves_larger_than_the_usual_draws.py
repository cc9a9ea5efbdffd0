"""WRONG (the technique only on shapes the grader never draws): ZeRO-1 exactly as the reference for every
leaf of at most 4096 values; a larger leaf has its gradient psummed whole, its moments all-gathered
whole and its update run whole on every device (only its new moment blocks are kept). The grader's
leaves hold at most 28 x 56 = 1568 values, so every leaf it draws takes the ZeRO-1 path; a model of any
real size would take the other. With the threshold lowered to 100 values the same module scores 12/19
at seed 20261130 (gradients_are_not_summed_whole, only_the_updated_parameters_are_all_gathered and
each_device_updates_only_its_blocks fail): the code path is caught when it is run.

Scored before the grader's fix (seed 20261130 and 7, with and without --sandbox): 19/19.
Should score: 12/19 (what its other path scores).
Why it passed: config() drew d_in from {12, 20, 28}, hidden from {24, 40, 56}: no leaf larger than
1568 values was ever tried, so a size-gated path was never traced. Since the grader's fix the run on 2 devices
(checks.WIDE_MESH) draws dense1's input width from {356, 420, 484}: a kernel of 8,544 to 27,104 values,
whose whole psum, gathered moments and whole update are read there: 12/19 with and without --sandbox
on seeds 20261130 and 7. (A threshold above the largest drawn leaf still passes: the grader can only
try the sizes it draws.)

loses: gradients_are_not_summed_whole: sums a whole gradient across devices
loses: only_the_updated_parameters_are_all_gathered: ZeRO-1 gathers each split parameter once
loses: each_device_updates_only_its_blocks: Each device updates whole leaves

Grade: put this file as ex9_zero1_adamw.py in a folder D; .venv/bin/python -m graders ex9 --solutions D -v --seed 20261130 [--sandbox]
"""
import math
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

LN_EPS = 1e-5


def init_params(key, d_in, d_hidden, d_out):
    k1, k2 = jax.random.split(key)
    return {"dense1": {"kernel": jax.random.normal(k1, (d_in, d_hidden)) / jnp.sqrt(d_in),
                       "bias": jnp.zeros((d_hidden,))},
            "norm": {"scale": jnp.ones((d_hidden,))},
            "dense2": {"kernel": jax.random.normal(k2, (d_hidden, d_out)) / jnp.sqrt(d_hidden),
                       "bias": jnp.zeros((d_out,))}}


def mlp(params, x):
    h = x @ params["dense1"]["kernel"] + params["dense1"]["bias"]
    mean = jnp.mean(h, axis=-1, keepdims=True)
    var = jnp.mean((h - mean) ** 2, axis=-1, keepdims=True)
    h = (h - mean) * lax.rsqrt(var + LN_EPS) * params["norm"]["scale"]
    return jnp.tanh(h) @ params["dense2"]["kernel"] + params["dense2"]["bias"]


def loss(params, x, y):
    return jnp.mean((mlp(params, x) - y) ** 2)


def make_mesh(n=8):
    return jax.make_mesh((n,), ("data",), devices=jax.devices()[:n])


def decay_mask(params):
    return jax.tree.map(lambda p: p.ndim >= 2, params)


def adamw_step(params, grads, state, lr, b1, b2, eps, wd, mask):
    count = state["count"] + 1
    mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state["mu"], grads)
    nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, state["nu"], grads)
    c1, c2 = 1 - b1 ** count, 1 - b2 ** count  # bias corrections for step t = count

    def update(p, m, v, decay):
        new = p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps)  # the Adam step
        return new - lr * wd * p if decay else new          # decoupled decay, from theta_{t-1}

    return jax.tree.map(update, params, mu, nu, mask), {"mu": mu, "nu": nu, "count": count}


def split_axis(shape, n):
    """The first axis of a leaf that n divides, or None: the leaf then stays replicated."""
    return next((i for i, d in enumerate(shape) if d % n == 0), None)


def zero1_spec(shape, n):
    axis = split_axis(shape, n)
    return P() if axis is None else P(*([None] * axis), "data")


def init_zero1_state(params, mesh):
    n = mesh.shape["data"]

    def zeros(p):
        return jax.device_put(jnp.zeros(p.shape, jnp.float32), NamedSharding(mesh, zero1_spec(p.shape, n)))

    return {"mu": jax.tree.map(zeros, params), "nu": jax.tree.map(zeros, params),
            "count": jax.device_put(jnp.zeros((), jnp.int32), NamedSharding(mesh, P()))}


BIG = 4096  # leaves with more values than this: the whole update on every device


def make_zero1_step(mesh, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=1e-2):
    n = mesh.shape["data"]

    @jax.jit
    def step(params, state, x, y):
        axes = jax.tree.map(lambda p: split_axis(p.shape, n), params)
        specs = jax.tree.map(lambda p: zero1_spec(p.shape, n), params)
        big = jax.tree.map(lambda p: math.prod(p.shape) > BIG, params)
        state_specs = {"mu": specs, "nu": specs, "count": P()}
        mask = decay_mask(params)

        def local(params, blocks, state, x, y):
            value, grads = jax.value_and_grad(loss)(lax.pcast(params, "data", to="varying"), x, y)

            def reduce(g, axis, whole):
                if axis is None or whole:  # a big leaf: summed whole, updated whole
                    return lax.psum(g, "data") / n
                return lax.psum_scatter(g, "data", scatter_dimension=axis, tiled=True) / n

            def gather(b, axis, whole=False):
                if axis is None or whole:
                    return b
                return lax.all_gather(b, "data", axis=axis, tiled=True, to="invarying")

            def own(w, axis, whole):
                if axis is None or not whole:
                    return w
                size = w.shape[axis] // n
                return lax.dynamic_slice_in_dim(w, lax.axis_index("data") * size, size, axis)

            grads = jax.tree.map(reduce, grads, axes, big)
            # big leaves: the whole moments on every device, and the whole parameters
            moments = {k: jax.tree.map(lambda b, a, w: gather(b, a) if w else b, state[k], axes, big)
                       for k in ("mu", "nu")}
            blocks = jax.tree.map(lambda b, p, w: p if w else b, blocks, params, big)
            blocks, new = adamw_step(blocks, grads, {**state, **moments}, lr, b1, b2, eps, wd, mask)
            new = {"count": new["count"], **{k: jax.tree.map(own, new[k], axes, big) for k in ("mu", "nu")}}
            return jax.tree.map(gather, blocks, axes, big), new, lax.pmean(value, "data")

        blocks = jax.tree.map(jax.reshard, params, specs)
        return jax.shard_map(local, mesh=mesh, in_specs=(P(), specs, state_specs, P("data"), P("data")),
                             out_specs=(P(), state_specs, P()))(params, blocks, state, x, y)

    return step
