"""Scheme (b) as a closed form: float32(w0 - steps*lr*grad), one rounding instead of one per step.
Within a few ulps of the answer, so only a bit-for-bit comparison sees it.

loses: master_matches_float32_simulation: the closed form w0 - steps*lr*grad rounded to float32 once
"""
import jax.numpy as jnp

from reference.ex4_master_weights import bf16_rounding_threshold, sgd_bf16, w_bf16  # noqa: F401  right as they are


def sgd_fp32_master(w0, lr, grad, steps):
    return jnp.float32(w0 - steps * lr * grad)


w_master = sgd_fp32_master(1.0, 1e-3, 1.0, 100)
