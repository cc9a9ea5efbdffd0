"""Compares good_steps, not good_steps + 1, with the period: grows one step late.

loses: scale_grows_exactly_at_period: it grows one step later
"""
import jax.numpy as jnp

from reference.ex8_loss_scaling import (DynScale, all_finite, fp16_loss, scaled_grads,  # noqa: F401
                                        train_fp16_dynamic)


def dyn_scale_step(ls, finite, period=50, factor=2.0, min_scale=1.0):
    grow = finite & (ls.good_steps >= period)
    scale = jnp.where(finite, jnp.where(grow, ls.scale * factor, ls.scale), jnp.maximum(ls.scale / factor, min_scale))
    return DynScale(scale, jnp.where(finite & ~grow, ls.good_steps + 1, 0))
