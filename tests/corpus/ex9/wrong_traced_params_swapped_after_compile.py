"""WRONG: tests/right/ex9/step_aot_lowered_and_compiled.py whose executables never train: the step
built with lr=0 is traced, lowered and compiled (frozen.trace(...).lower().compile(), nothing swapped
in its Lowered or Compiled); afterwards the Traced it was lowered from is given the right step's
jaxpr and constants (traced._params = {**right._params}, a new dict: the jit caches the first). Every real call runs the lr=0
executable and returns the params it was given.

Scored 19/19 with and without --sandbox, seeds 20261130, 7 and 0 (natively: a 4-step run on 8
devices leaves the params unchanged at every step): program.compiled_calls_traced checks the
Lowered's lowering and text and the Compiled's _executable, but binds the jaxpr and constants the
Traced object holds when the call is made (traced._params, traced._consts), which is no longer
what the executable was compiled from.

Should lose at least zero1_training_matches_single_device, as
tests/corpus/ex9/wrong_aot_step_compiled_from_a_frozen_lowering does (7/19).

Now read with the program it was compiled from, as its lowering was made (program.compiled_calls_traced snapshots the jit's parameters at lowering and reads a Compiled only while its executable, call parameters and call are the ones JAX made): its training runs show what a real run does. 7/19 in both modes (seeds 20261130, 7).

loses: zero1_training_matches_single_device: got [
"""
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


def make_zero1_step(mesh, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=1e-2):
    step, frozen = _build(mesh, lr, b1, b2, eps, wd), _build(mesh, 0.0, b1, b2, eps, wd)
    compiled = {}

    def aot(params, state, x, y):
        key = jax.tree.map(lambda a: (a.shape, str(a.dtype), str(getattr(a, "sharding", None))), (params, state, x, y))
        key = str(key)
        if key not in compiled:
            traced = frozen.trace(params, state, x, y)
            compiled[key] = traced.lower().compile()
            # The Traced the executable came from now holds the right step's program.
            right = step.trace(params, state, x, y)
            traced._params = {**right._params}
            traced._consts = right._consts
        return compiled[key](params, state, x, y)

    return aot


def _build(mesh, lr, b1, b2, eps, wd):
    n = mesh.shape["data"]

    @jax.jit
    def step(params, state, x, y):
        axes = jax.tree.map(lambda p: split_axis(p.shape, n), params)
        specs = jax.tree.map(lambda p: zero1_spec(p.shape, n), params)
        state_specs = {"mu": specs, "nu": specs, "count": P()}
        mask = decay_mask(params)

        def local(params, blocks, state, x, y):
            # Differentiated as a varying value: each device's own gradient, not yet summed.
            value, grads = jax.value_and_grad(loss)(lax.pcast(params, "data", to="varying"), x, y)

            def reduce(g, axis):  # the mean over devices of equal shards is the whole batch's mean
                if axis is None:
                    return lax.psum(g, "data") / n
                return lax.psum_scatter(g, "data", scatter_dimension=axis, tiled=True) / n

            grads = jax.tree.map(reduce, grads, axes)
            blocks, state = adamw_step(blocks, grads, state, lr, b1, b2, eps, wd, mask)

            def gather(b, axis):
                return b if axis is None else lax.all_gather(b, "data", axis=axis, tiled=True, to="invarying")

            return jax.tree.map(gather, blocks, axes), state, lax.pmean(value, "data")

        blocks = jax.tree.map(jax.reshard, params, specs)  # this device's block: a local slice
        return jax.shard_map(local, mesh=mesh, in_specs=(P(), specs, state_specs, P("data"), P("data")),
                             out_specs=(P(), state_specs, P()))(params, blocks, state, x, y)

    return step
