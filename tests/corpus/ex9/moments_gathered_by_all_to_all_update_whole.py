"""WRONG (no ZeRO-1 inside the step): the gradient is reduce-scattered right (lax.psum_scatter), but then
every device rebuilds the WHOLE gradient and the WHOLE moments from the blocks with lax.all_to_all
(each device sends n copies of its block; row i of what it receives is device i's block), runs
adamw_step on whole leaves, keeps its block of the new moments and all-gathers its block of the new
params (already whole on every device) for show. Every number is right; the moments are split at rest.

Scored (seed 20261130): 16/19 without --sandbox, 16/19 with --sandbox; seed 7: 16/19 and 16/19
(verdicts and messages the same in both modes).
Should score: 14/19: only_the_updated_parameters_are_all_gathered (2) should fail as well (the moments
and the gradients are gathered, 3x the split parameters' values, by all-to-all).
Checks failed: each_device_updates_only_its_blocks (10.3 times a 1/8 share on 8 devices).
Why: only_the_updated_parameters_are_all_gathered counts all-gathers, collective-permutes and psums
beyond the whole gradient; all-to-all (12 of them in the compiled step on every mesh) is counted
nowhere, so whole moments gathered by all-to-all pass it. The FLOPs/values check catches this one
only because the whole update is written plainly: see moments_gathered_by_all_to_all_update_whole_in_while_loop.
Graded right since the grader's fix (an all_to_all whose received blocks are not added up counts as a gather): 14/19.

loses: only_the_updated_parameters_are_all_gathered: Moments sharded but gathered inside the step
loses: each_device_updates_only_its_blocks: Each device updates whole leaves

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




def _update(params, g, state, hp, mask, axes, n):
    """The whole AdamW update, on every device."""
    return adamw_step(params, g, state, *hp, mask)


def _a2a_whole(b, axis, n):
    """Every device's block of a leaf, via lax.all_to_all of n copies of its own block: the whole leaf."""
    if axis is None:
        return b
    got = lax.all_to_all(jnp.stack([b] * n), "data", 0, 0, tiled=True)  # row i: device i's block
    got = jnp.moveaxis(got, 0, axis)
    shape = list(b.shape)
    shape[axis] *= n
    return got.reshape(shape)


def _own(w, axis, n):
    if axis is None:
        return w
    size = w.shape[axis] // n
    return lax.dynamic_slice_in_dim(w, lax.axis_index("data") * size, size, axis)


def make_zero1_step(mesh, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=1e-2):
    n = mesh.shape["data"]

    @jax.jit
    def step(params, state, x, y):
        axes = jax.tree.map(lambda p: split_axis(p.shape, n), params)
        specs = jax.tree.map(lambda p: zero1_spec(p.shape, n), params)
        state_specs = {"mu": specs, "nu": specs, "count": P()}
        mask = decay_mask(params)

        def local(params, state, x, y):
            value, grads = jax.value_and_grad(loss)(lax.pcast(params, "data", to="varying"), x, y)

            def reduce(g, axis):
                if axis is None:
                    return lax.psum(g, "data") / n
                return lax.psum_scatter(g, "data", scatter_dimension=axis, tiled=True) / n

            grads = jax.tree.map(reduce, grads, axes)
            whole = lambda t: jax.tree.map(lambda b, a: _a2a_whole(b, a, n), t, axes)
            g, mu, nu = whole(grads), whole(state["mu"]), whole(state["nu"])
            new, st = _update(params, g, {"mu": mu, "nu": nu, "count": state["count"]}, (lr, b1, b2, eps, wd), mask, axes, n)
            own = lambda t: jax.tree.map(lambda w, a: _own(w, a, n), t, axes)
            blocks = own(new)

            def gather(b, axis):
                return b if axis is None else lax.all_gather(b, "data", axis=axis, tiled=True, to="invarying")

            return (jax.tree.map(gather, blocks, axes), {"mu": own(st["mu"]), "nu": own(st["nu"]), "count": st["count"]},
                    lax.pmean(value, "data"))

        return jax.shard_map(local, mesh=mesh, in_specs=(P(), state_specs, P("data"), P("data")),
                             out_specs=(P(), state_specs, P()))(params, state, x, y)

    return step
