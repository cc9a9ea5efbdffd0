"""Scales the loss before differentiating but never divides the gradients by the scale.

loses: grads_at_scale_2_15_keep_fp16s_precision: forgetting to unscale
"""
import jax

from reference.ex8_loss_scaling import (DynScale, all_finite, dyn_scale_step, fp16_loss,  # noqa: F401
                                        train_fp16_dynamic)


def scaled_grads(params, x, y, scale):
    grads = jax.grad(lambda p: fp16_loss(p, x, y) * scale)(params)
    return grads, all_finite(grads)
