"""Decides the skip from scaled_grads' flag, but updates with the plain fp16 gradients of the
unscaled loss: the scale protects nothing, and what underflows stays 0 in the update.

loses: training_computes_in_fp16_inside_the_scan: the update uses gradients the scale never reached
loses: training_matches_step_by_step_simulation: final parameters
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
        _, finite = scaled_grads(p, x, y, ls.scale)
        grads = jax.grad(fp16_loss)(p, x, y)
        updates, opt_new = tx.update(jax.tree.map(lambda g: jnp.where(finite, g, 0.0), grads), opt, p)
        keep = lambda new, old: jnp.where(finite, new, old)
        p_new, opt = jax.tree.map(keep, optax.apply_updates(p, updates), p), jax.tree.map(keep, opt_new, opt)
        return (p_new, opt, dyn_scale_step(ls, finite)), (ls.scale, finite, fp16_loss(p, x, y))

    (p, _, ls), (scales, finites, losses) = lax.scan(step, (params, tx.init(params), ls0), None, length=steps)
    return p, ls, scales, finites, losses
