"""Counts to 50 whatever period it is given.

loses: scale_grows_exactly_at_period: is the period hard-coded to 50
"""
import jax.numpy as jnp

from reference.ex8_loss_scaling import (DynScale, all_finite, fp16_loss, scaled_grads,  # noqa: F401
                                        train_fp16_dynamic)


def dyn_scale_step(ls, finite, period=50, factor=2.0, min_scale=1.0):
    grow = finite & (ls.good_steps + 1 >= 50)
    scale = jnp.where(finite, jnp.where(grow, ls.scale * factor, ls.scale), jnp.maximum(ls.scale / factor, min_scale))
    return DynScale(scale, jnp.where(finite & ~grow, ls.good_steps + 1, 0))
