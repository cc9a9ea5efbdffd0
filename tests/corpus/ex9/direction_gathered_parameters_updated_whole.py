"""Each device computes the Adam direction of its blocks, then the direction is all-gathered and
every device applies it, with the decay, to the whole parameters: the moments are split, but the
parameters' update is not (3 times a device's share of the optimizer's work, or more).

loses: each_device_updates_only_its_blocks: the parameters updated whole from a gathered Adam direction
"""
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from reference.ex9_zero1_adamw import (  # noqa: F401  right as they are
    adamw_step, decay_mask, init_params, init_zero1_state, loss, make_mesh, mlp, zero1_spec,
)


def make_zero1_step(mesh, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=1e-2):
    n = mesh.shape["data"]

    @jax.jit
    def step(params, state, x, y):
        specs = jax.tree.map(lambda p: zero1_spec(p.shape, n), params)
        value, grads = jax.value_and_grad(loss)(params, x, y)
        g = jax.tree.map(jax.reshard, grads, specs)
        count = state["count"] + 1
        mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state["mu"], g)
        nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, state["nu"], g)
        direction = jax.tree.map(lambda m, v: (m / (1 - b1 ** count)) / (jnp.sqrt(v / (1 - b2 ** count)) + eps), mu, nu)
        direction = jax.tree.map(lambda d: jax.reshard(d, P()), direction)
        new = jax.tree.map(lambda p, d, k: p - lr * (d + (wd * p if k else 0.0)), params, direction, decay_mask(params))
        return new, {"mu": mu, "nu": nu, "count": count}, value

    return step
