"""Right: the reference's shard_map ZeRO-1 (gradients psum_scattered, AdamW on each device's blocks, new
blocks all-gathered) whose adamw_step takes the first step by a branch of its own: lax.cond(count == 1,
first, later, ...), where `first` uses m_1 = (1 - b1) g and v_1 = (1 - b2) g**2 (so m_hat = g, v_hat =
g**2) and `later` is the usual update. One branch runs per step; each updates only the device's blocks.
19/19 at seeds 20261130 and 7, with and without --sandbox (1.00 times the share on every mesh).
Was 16/19: optimizer_work added up both branches (2.16 times the share) and gave a branch the
mask of all the conditional's operands; a conditional now counts as its heaviest branch."""
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
    """AdamW with the first step taken by a branch of its own (lax.cond on the count): from fresh
    moments, m_1 = (1 - b1) g and v_1 = (1 - b2) g**2, so m_hat = g and v_hat = g**2 exactly."""
    count = state["count"] + 1

    def update(p, m_hat, v_hat, decay):
        new = p - lr * m_hat / (jnp.sqrt(v_hat) + eps)
        return new - lr * wd * p if decay else new

    def first(params, grads, mu, nu):
        mu = jax.tree.map(lambda g: (1 - b1) * g, grads)
        nu = jax.tree.map(lambda g: (1 - b2) * g * g, grads)
        new = jax.tree.map(lambda p, m, v, d: update(p, m / (1 - b1), v / (1 - b2), d), params, mu, nu, mask)
        return new, mu, nu

    def later(params, grads, mu, nu):
        mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, mu, grads)
        nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, nu, grads)
        c1, c2 = 1 - b1 ** count, 1 - b2 ** count
        new = jax.tree.map(lambda p, m, v, d: update(p, m / c1, v / c2, d), params, mu, nu, mask)
        return new, mu, nu

    new, mu, nu = lax.cond(count == 1, first, later, params, grads, state["mu"], state["nu"])
    return new, {"mu": mu, "nu": nu, "count": count}


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
