"""Keeps the old parameters on a skipped step but lets Adam's state advance (an update with
zeroed gradients still moves the count and decays the moments).

loses: skipped_steps_leave_params_and_adam_state_unchanged: changing the optimizer state on a skipped step
loses: training_matches_step_by_step_simulation: changing the optimizer state on a skipped step
"""
from functools import partial

import jax
import jax.numpy as jnp
import optax
from jax import lax

from reference.ex8_loss_scaling import DynScale, all_finite, dyn_scale_step, fp16_loss, scaled_grads  # noqa: F401


@partial(jax.jit, static_argnames=("steps", "tx"))
def train_fp16_dynamic(params, x, y, ls0, steps, tx):
    def step(carry, _):
        p, opt, ls = carry
        grads, finite = scaled_grads(p, x, y, ls.scale)
        updates, opt = tx.update(jax.tree.map(lambda g: jnp.where(finite, g, 0.0), grads), opt, p)
        p_new = optax.apply_updates(p, updates)
        p_next = jax.tree.map(lambda a, b: jnp.where(finite, a, b), p_new, p)
        return (p_next, opt, dyn_scale_step(ls, finite)), (ls.scale, finite, fp16_loss(p, x, y))

    (p, _, ls), (scales, finites, losses) = lax.scan(step, (params, tx.init(params), ls0), None, length=steps)
    return p, ls, scales, finites, losses
