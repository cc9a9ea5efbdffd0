"""Corrects with the count before the step, t = count: from a fresh state 1 - b1**0 = 0.

loses: adamw_step_matches_optax_adamw: t = count, the count before this step
loses: adamw_step_continues_from_a_saved_state: t = count, the count before this step
"""
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from reference.ex9_zero1_adamw import (  # noqa: F401  right as they are
    decay_mask, init_params, init_zero1_state, loss, make_mesh, mlp, zero1_spec,
)


def adamw_step(params, grads, state, lr, b1, b2, eps, wd, mask):
    count = state["count"] + 1
    t = state["count"]
    mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state["mu"], grads)
    nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, state["nu"], grads)

    def update(p, m, v, decay):
        new = p - lr * (m / (1 - b1 ** t)) / (jnp.sqrt(v / (1 - b2 ** t)) + eps)
        return new - lr * wd * p if decay else new

    return jax.tree.map(update, params, mu, nu, mask), {"mu": mu, "nu": nu, "count": count}


def make_zero1_step(mesh, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=1e-2):
    n = mesh.shape["data"]

    @jax.jit
    def step(params, state, x, y):
        specs = jax.tree.map(lambda p: zero1_spec(p.shape, n), params)
        value, grads = jax.value_and_grad(loss)(params, x, y)
        blocks, state = adamw_step(jax.tree.map(jax.reshard, params, specs), jax.tree.map(jax.reshard, grads, specs),
                                   state, lr, b1, b2, eps, wd, decay_mask(params))
        return jax.tree.map(lambda b: jax.reshard(b, P()), blocks), state, value

    return step
