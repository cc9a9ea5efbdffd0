"""RIGHT (an all-gather written as a ring): ZeRO-1 in shard_map (check_vma=False, so each device
differentiates its own rows and no psum is added), gradients reduce-scattered with lax.psum_scatter,
adamw_step on each device's blocks, and the updated parameter blocks all-gathered by hand as ring
all-gather algorithms do: n - 1 lax.ppermute shifts pass every block round the mesh and each device
puts what it received in device order. Nothing but the new parameters moves.

Scored (seed 20261130): 17/19 without --sandbox, 17/19 with --sandbox; seed 7: 17/19 and 17/19
(verdicts and messages the same in both modes).
Should score: 19/19.
Checks failed: only_the_updated_parameters_are_all_gathered (2): "all-gathers 1225 values; ZeRO-1
gathers each split parameter once (... 1400 values)".
Why: the check adds the collective-permutes' values to the all-gathers' and wants exactly the split
parameters' size; a ring moves (n - 1)/n of each leaf (a device's own block never moves), so the sum
is 1225 of 1400 on 8 devices. Every parameter value is gathered once; none of the moments or gradients.
Graded right since the grader's fix (what a device ends up with: the blocks it receives plus its own): 19/19.

Grade: put this file as ex9_zero1_adamw.py in a folder D; .venv/bin/python -m graders ex9 --solutions D -v --seed 20261130 [--sandbox]
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


def ring_all_gather(block, axis, n):
    """The whole leaf from every device's block along `axis`: n - 1 shifts round the ring."""
    ring = [(j, (j + 1) % n) for j in range(n)]
    held, cur = [block], block
    for _ in range(n - 1):
        cur = lax.ppermute(cur, "data", ring)  # after k shifts: the block of device (me - k) mod n
        held.append(cur)
    me = lax.axis_index("data")
    order = (me - jnp.arange(n)) % n  # device j's block sits at position (me - j) mod n
    stacked = jnp.take(jnp.stack(held), order, axis=0)
    stacked = jnp.moveaxis(stacked, 0, axis)
    shape = list(block.shape)
    shape[axis] *= n
    return stacked.reshape(shape)


def make_zero1_step(mesh, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=1e-2):
    n = mesh.shape["data"]

    @jax.jit
    def step(params, state, x, y):
        axes = jax.tree.map(lambda p: split_axis(p.shape, n), params)
        specs = jax.tree.map(lambda p: zero1_spec(p.shape, n), params)
        state_specs = {"mu": specs, "nu": specs, "count": P()}
        mask = decay_mask(params)

        def local(params, blocks, state, x, y):
            value, grads = jax.value_and_grad(loss)(params, x, y)

            def reduce(g, axis):
                if axis is None:
                    return lax.psum(g, "data") / n
                return lax.psum_scatter(g, "data", scatter_dimension=axis, tiled=True) / n

            grads = jax.tree.map(reduce, grads, axes)
            blocks, state = adamw_step(blocks, grads, state, lr, b1, b2, eps, wd, mask)
            new = jax.tree.map(lambda b, a: b if a is None else ring_all_gather(b, a, n), blocks, axes)
            return new, state, lax.pmean(value, "data")

        blocks = jax.tree.map(jax.reshard, params, specs)
        return jax.shard_map(local, mesh=mesh, in_specs=(P(), specs, state_specs, P("data"), P("data")),
                             out_specs=(P(), state_specs, P()), check_vma=False)(params, blocks, state, x, y)

    return step
