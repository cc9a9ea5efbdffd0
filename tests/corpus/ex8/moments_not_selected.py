"""Keeps the old parameters on an overflow, but takes the optimizer state that the inf/NaN
gradients made: Adam's moments become NaN at the first skip, and every later update with them.

loses: skip_is_decided_inside_the_scan_from_the_steps_finite_flag: the optimizer state changed on a skipped step
loses: training_matches_step_by_step_simulation: The parameters end inf/NaN
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
        updates, opt = tx.update(grads, opt, p)
        p_new = jax.tree.map(lambda new, old: jnp.where(finite, new, old), optax.apply_updates(p, updates), p)
        return (p_new, opt, dyn_scale_step(ls, finite)), (ls.scale, finite, fp16_loss(p, x, y))

    (p, _, ls), (scales, finites, losses) = lax.scan(step, (params, tx.init(params), ls0), None, length=steps)
    return p, ls, scales, finites, losses
