"""Returns the unscaled gradients in fp16, "the compute dtype".

loses: grads_come_back_in_float32: expected float32 for every leaf
"""
import jax
import jax.numpy as jnp

from reference.ex8_loss_scaling import (DynScale, all_finite, dyn_scale_step, fp16_loss,  # noqa: F401
                                        train_fp16_dynamic)


def scaled_grads(params, x, y, scale):
    grads = jax.grad(lambda p: fp16_loss(p, x, y) * scale)(params)
    grads = jax.tree.map(lambda g: (g / scale).astype(jnp.float16), grads)
    return grads, all_finite(grads)
