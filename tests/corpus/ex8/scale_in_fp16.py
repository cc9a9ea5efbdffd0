"""Holds the loss scale in fp16, "to match the compute": 2^16 and above are inf there.

loses: scale_is_held_in_float32: holding the scale in fp16
loses: training_recovers_from_a_too_large_scale: holding the scale in fp16
"""
from functools import partial

import jax
import jax.numpy as jnp
import optax
from jax import lax

from reference.ex8_loss_scaling import DynScale, all_finite, fp16_loss, scaled_grads  # noqa: F401


def dyn_scale_step(ls, finite, period=50, factor=2.0, min_scale=1.0):
    grow = finite & (ls.good_steps + 1 >= period)
    scale = jnp.where(finite, jnp.where(grow, ls.scale * factor, ls.scale), jnp.maximum(ls.scale / factor, min_scale))
    return DynScale(scale.astype(jnp.float16), jnp.where(finite & ~grow, ls.good_steps + 1, 0))


@partial(jax.jit, static_argnames=("steps", "tx"))
def train_fp16_dynamic(params, x, y, ls0, steps, tx):
    def step(carry, _):
        p, opt, ls = carry
        grads, finite = scaled_grads(p, x, y, ls.scale.astype(jnp.float32))
        safe = jax.tree.map(lambda g: jnp.where(finite, g, 0.0), grads)
        updates, opt_new = tx.update(safe, opt, p)
        keep = lambda new, old: jnp.where(finite, new, old)
        p, opt = jax.tree.map(keep, optax.apply_updates(p, updates), p), jax.tree.map(keep, opt_new, opt)
        return (p, opt, dyn_scale_step(ls, finite)), (ls.scale, finite, fp16_loss(carry[0], x, y))

    ls0 = DynScale(ls0.scale.astype(jnp.float16), ls0.good_steps)
    (p, _, ls), (scales, finites, losses) = lax.scan(step, (params, tx.init(params), ls0), None, length=steps)
    return p, ls, scales, finites, losses
