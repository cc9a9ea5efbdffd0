"""Decoy: the new parameters "depend on" the finite flag (a jnp.where that adds 0 either way),
but the update is applied on every step, overflow or not.

loses: skip_is_decided_inside_the_scan_from_the_steps_finite_flag: that is updating on an overflow
loses: skipped_steps_leave_params_and_adam_state_unchanged: updating on an overflow
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
        p_new = jax.tree.map(lambda a, u: a + u + jnp.where(finite, 0.0, 0.0), p, updates)
        return (p_new, opt, dyn_scale_step(ls, finite)), (ls.scale, finite, fp16_loss(p, x, y))

    (p, _, ls), (scales, finites, losses) = lax.scan(step, (params, tx.init(params), ls0), None, length=steps)
    return p, ls, scales, finites, losses
