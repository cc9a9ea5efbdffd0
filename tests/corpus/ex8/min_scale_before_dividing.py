"""Applies the floor before dividing (max(scale, min_scale) / factor): right while the scale is
far above min_scale, below it once the scale gets there.

loses: scale_never_goes_below_min_scale: shrinking below min_scale
"""
import jax.numpy as jnp

from reference.ex8_loss_scaling import (DynScale, all_finite, fp16_loss, scaled_grads,  # noqa: F401
                                        train_fp16_dynamic)


def dyn_scale_step(ls, finite, period=50, factor=2.0, min_scale=1.0):
    grow = finite & (ls.good_steps + 1 >= period)
    scale = jnp.where(finite, jnp.where(grow, ls.scale * factor, ls.scale), jnp.maximum(ls.scale, min_scale) / factor)
    return DynScale(scale, jnp.where(finite & ~grow, ls.good_steps + 1, 0))
