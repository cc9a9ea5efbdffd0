"""Differentiates the plain fp16 loss, then multiplies by the scale and divides it out again:
the fp16 backward pass never sees the scale.

loses: grads_at_scale_2_15_keep_fp16s_precision: scaling after differentiating
loses: grads_at_scale_2_32_report_not_finite: reported finite=True, expected False
"""
import jax

from reference.ex8_loss_scaling import (DynScale, all_finite, dyn_scale_step, fp16_loss,  # noqa: F401
                                        train_fp16_dynamic)


def scaled_grads(params, x, y, scale):
    grads = jax.grad(fp16_loss)(params, x, y)
    grads = jax.tree.map(lambda g: (g * scale) / scale, grads)
    return grads, all_finite(grads)
