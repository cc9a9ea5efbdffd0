"""Shrinks the scale on an overflow but leaves the count of good steps where it was.

loses: scale_shrinks_and_counter_resets_on_overflow: the counter was not reset
"""
import jax.numpy as jnp

from reference.ex8_loss_scaling import (DynScale, all_finite, fp16_loss, scaled_grads,  # noqa: F401
                                        train_fp16_dynamic)


def dyn_scale_step(ls, finite, period=50, factor=2.0, min_scale=1.0):
    grow = finite & (ls.good_steps + 1 >= period)
    scale = jnp.where(finite, jnp.where(grow, ls.scale * factor, ls.scale), jnp.maximum(ls.scale / factor, min_scale))
    good = jnp.where(grow, 0, jnp.where(finite, ls.good_steps + 1, ls.good_steps))
    return DynScale(scale, good)
