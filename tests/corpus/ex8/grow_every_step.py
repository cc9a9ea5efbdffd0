"""Grows the scale on every finite step: the period is ignored.

loses: scale_grows_exactly_at_period: growing on every finite step
"""
import jax.numpy as jnp

from reference.ex8_loss_scaling import (DynScale, all_finite, fp16_loss, scaled_grads,  # noqa: F401
                                        train_fp16_dynamic)


def dyn_scale_step(ls, finite, period=50, factor=2.0, min_scale=1.0):
    scale = jnp.where(finite, ls.scale * factor, jnp.maximum(ls.scale / factor, min_scale))
    return DynScale(scale, jnp.where(finite, ls.good_steps + 1, 0))
