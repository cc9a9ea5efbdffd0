"""Right: each device computes the AdamW update of its blocks (moments, decay and all) and the
update, not the new parameters, is all-gathered and added to the replicated parameters: the same
communication as gathering the parameters. The gradient is reduce-scattered from one psum_scatter
per leaf inside a jax.vjp, and the loss is averaged by a psum divided by the axis size.
"""
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P

from reference.ex9_zero1_adamw import (  # noqa: F401  right as they are
    decay_mask, init_params, init_zero1_state, loss, make_mesh, mlp, split_axis, zero1_spec,
)


def adamw_step(params, grads, state, lr, b1, b2, eps, wd, mask):
    delta, state = adamw_update(params, grads, state, lr, b1, b2, eps, wd, mask)
    return jax.tree.map(jnp.add, params, delta), state


def adamw_update(params, grads, state, lr, b1, b2, eps, wd, mask):
    """The change AdamW makes to each leaf, and the new state."""
    count = state["count"] + 1
    mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state["mu"], grads)
    nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, state["nu"], grads)
    c1, c2 = 1 - b1 ** count, 1 - b2 ** count
    delta = jax.tree.map(lambda p, m, v, d: -lr * ((m / c1) / (jnp.sqrt(v / c2) + eps) + (wd * p if d else 0.0)),
                         params, mu, nu, mask)
    return delta, {"mu": mu, "nu": nu, "count": count}


def make_zero1_step(mesh, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=1e-2):
    n = mesh.shape["data"]

    @jax.jit
    def step(params, state, x, y):
        axes = jax.tree.map(lambda p: split_axis(p.shape, n), params)
        specs = jax.tree.map(lambda p: zero1_spec(p.shape, n), params)
        state_specs = {"mu": specs, "nu": specs, "count": P()}
        mask = decay_mask(params)

        def local(params, blocks, state, x, y):
            value, pullback = jax.vjp(lambda p: loss(p, x, y), lax.pcast(params, "data", to="varying"))
            (grads,) = pullback(jnp.ones_like(value))
            grads = jax.tree.map(lambda g, a: lax.psum(g, "data") / n if a is None else
                                 lax.psum_scatter(g, "data", scatter_dimension=a, tiled=True) / n, grads, axes)
            delta, state = adamw_update(blocks, grads, state, lr, b1, b2, eps, wd, mask)
            delta = jax.tree.map(lambda d, a: d if a is None else
                                 lax.all_gather(d, "data", axis=a, tiled=True, to="invarying"), delta, axes)
            return jax.tree.map(jnp.add, params, delta), state, lax.psum(value, "data") / n

        blocks = jax.tree.map(jax.reshard, params, specs)
        return jax.shard_map(local, mesh=mesh, in_specs=(P(), specs, state_specs, P("data"), P("data")),
                             out_specs=(P(), state_specs, P()))(params, blocks, state, x, y)

    return step
