"""Decides the growth from the counter alone: an overflow on the step that would reach the
period grows the scale instead of shrinking it (right in every other state).

loses: scale_shrinks_and_counter_resets_on_overflow: also when the counter is one step from growing
"""
import jax.numpy as jnp

from reference.ex8_loss_scaling import (DynScale, all_finite, fp16_loss, scaled_grads,  # noqa: F401
                                        train_fp16_dynamic)


def dyn_scale_step(ls, finite, period=50, factor=2.0, min_scale=1.0):
    grow = ls.good_steps + 1 >= period
    scale = jnp.where(grow, ls.scale * factor, jnp.where(finite, ls.scale, jnp.maximum(ls.scale / factor, min_scale)))
    return DynScale(scale, jnp.where(finite & ~grow, ls.good_steps + 1, 0))
