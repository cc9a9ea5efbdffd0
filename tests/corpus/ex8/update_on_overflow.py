"""Applies the optimizer's update on every step, finite or not.

loses: skipped_steps_leave_params_and_adam_state_unchanged: updating on an overflow
loses: skip_is_decided_inside_the_scan_from_the_steps_finite_flag: updating on an overflow
"""
from functools import partial

import jax
import optax
from jax import lax

from reference.ex8_loss_scaling import DynScale, all_finite, dyn_scale_step, fp16_loss, scaled_grads  # noqa: F401


@partial(jax.jit, static_argnames=("steps", "tx"))
def train_fp16_dynamic(params, x, y, ls0, steps, tx):
    def step(carry, _):
        p, opt, ls = carry
        grads, finite = scaled_grads(p, x, y, ls.scale)
        updates, opt = tx.update(grads, opt, p)
        return (optax.apply_updates(p, updates), opt, dyn_scale_step(ls, finite)), (ls.scale, finite, fp16_loss(p, x, y))

    (p, _, ls), (scales, finites, losses) = lax.scan(step, (params, tx.init(params), ls0), None, length=steps)
    return p, ls, scales, finites, losses
