"""Wrong: ZeRO-1 (jit + reshard) only when the mesh has 8 devices; on 4 and 2 devices the step
gathers the moments whole (jax.reshard(m, P())), updates every leaf whole on every device, and
reshards the new moments back to their split placement on return. Every number is right. (found by
the red team of issue 31's judge, when the technique was read on 8 devices only)

loses: only_the_updated_parameters_are_all_gathered: on 4 devices all-gathers
loses: each_device_updates_only_its_blocks: on 4 devices each device computes
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
    n = mesh.shape["data"]

    @jax.jit
    def zero1(params, state, x, y):
        specs = jax.tree.map(lambda p: zero1_spec(p.shape, n), params)
        value, grads = jax.value_and_grad(loss)(params, x, y)
        grads = jax.tree.map(jax.reshard, grads, specs)
        blocks = jax.tree.map(jax.reshard, params, specs)
        blocks, state = adamw_step(blocks, grads, state, lr, b1, b2, eps, wd, decay_mask(params))
        return jax.tree.map(lambda b: jax.reshard(b, P()), blocks), state, value

    @jax.jit
    def whole(params, state, x, y):
        specs = jax.tree.map(lambda p: zero1_spec(p.shape, n), params)
        value, grads = jax.value_and_grad(loss)(params, x, y)
        gathered = {"mu": jax.tree.map(lambda m: jax.reshard(m, P()), state["mu"]),
                    "nu": jax.tree.map(lambda v: jax.reshard(v, P()), state["nu"]), "count": state["count"]}
        params, new = adamw_step(params, grads, gathered, lr, b1, b2, eps, wd, decay_mask(params))
        new = {"mu": jax.tree.map(jax.reshard, new["mu"], specs), "nu": jax.tree.map(jax.reshard, new["nu"], specs),
               "count": new["count"]}
        return params, new, value

    return zero1 if n == 8 else whole
