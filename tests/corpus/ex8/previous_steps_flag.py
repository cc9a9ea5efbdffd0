"""Carries the finite flag and decides each step's skip from the previous step's flag (the
first step trusts its gradients): an overflow is applied, and the step after it skipped.

loses: skip_is_decided_inside_the_scan_from_the_steps_finite_flag: that is updating on an overflow
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
        p, opt, ls, was_finite = carry
        grads, finite = scaled_grads(p, x, y, ls.scale)
        updates, opt_new = tx.update(jax.tree.map(lambda g: jnp.where(was_finite, g, 0.0), grads), opt, p)
        keep = lambda new, old: jnp.where(was_finite, new, old)
        p_new, opt = jax.tree.map(keep, optax.apply_updates(p, updates), p), jax.tree.map(keep, opt_new, opt)
        return (p_new, opt, dyn_scale_step(ls, finite), finite), (ls.scale, finite, fp16_loss(p, x, y))

    init = (params, tx.init(params), ls0, jnp.array(True))
    (p, _, ls, _), (scales, finites, losses) = lax.scan(step, init, None, length=steps)
    return p, ls, scales, finites, losses
