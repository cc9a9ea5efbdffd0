"""Starts the loop's scale from ls0 but its counter from 0: ls0.good_steps is thrown away, so
the first growth comes late when ls0 has counted good steps already.

loses: training_matches_step_by_step_simulation: That is ignoring ls0's counter
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
        updates, opt_new = tx.update(jax.tree.map(lambda g: jnp.where(finite, g, 0.0), grads), opt, p)
        keep = lambda new, old: jnp.where(finite, new, old)
        p_new, opt = jax.tree.map(keep, optax.apply_updates(p, updates), p), jax.tree.map(keep, opt_new, opt)
        return (p_new, opt, dyn_scale_step(ls, finite)), (ls.scale, finite, fp16_loss(p, x, y))

    fresh = DynScale(ls0.scale, jnp.int32(0))
    (p, _, ls), (scales, finites, losses) = lax.scan(step, (params, tx.init(params), fresh), None, length=steps)
    return p, ls, scales, finites, losses
