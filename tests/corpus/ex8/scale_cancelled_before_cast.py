"""Decoy: the scale is multiplied into the fp32 loss and divided out again inside the function
that is differentiated, so the cotangent reaching the fp16 cast is unscaled.

loses: grads_at_scale_2_15_keep_fp16s_precision: the fp16 backward pass never saw the scale
"""
import jax

from reference.ex8_loss_scaling import (DynScale, all_finite, dyn_scale_step, fp16_loss,  # noqa: F401
                                        train_fp16_dynamic)


def scaled_grads(params, x, y, scale):
    grads = jax.grad(lambda p: (fp16_loss(p, x, y) * scale) / scale)(params)
    return grads, all_finite(grads)
