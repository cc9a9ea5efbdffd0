"""Reports whether the loss is finite instead of the gradients: the scaled loss stays finite in
float32 while the fp16 cotangents of the backward pass overflow.

loses: grads_at_scale_2_32_report_not_finite: reported finite=True, expected False
"""
import jax
import jax.numpy as jnp

from reference.ex8_loss_scaling import (DynScale, all_finite, dyn_scale_step, fp16_loss,  # noqa: F401
                                        train_fp16_dynamic)


def scaled_grads(params, x, y, scale):
    loss, grads = jax.value_and_grad(lambda p: fp16_loss(p, x, y) * scale)(params)
    return jax.tree.map(lambda g: g / scale, grads), jnp.isfinite(loss)
