"""Right: both schemes are plain Python loops on JAX scalars (each step dispatched eagerly), and
the threshold reads the next smaller bf16 number off the bit pattern: a positive bf16's bits,
as an integer, minus one.
"""
import jax.numpy as jnp
import ml_dtypes
import numpy as np


def sgd_bf16(w0, lr, grad, steps):
    w = jnp.bfloat16(w0)
    for _ in range(steps):
        w = jnp.bfloat16(w.astype(jnp.float32) - jnp.float32(lr * grad))
    return w


def sgd_fp32_master(w0, lr, grad, steps):
    w = jnp.float32(w0)
    for _ in range(steps):
        w -= jnp.float32(lr * grad)
    return w


def bf16_rounding_threshold(w):
    stored = np.array([w], ml_dtypes.bfloat16)
    below = (stored.view(np.uint16) - 1).view(ml_dtypes.bfloat16)
    return float(stored[0].astype(np.float64) - below[0].astype(np.float64)) / 2


w_bf16, w_master = sgd_bf16(1.0, 1e-3, 1.0, 100), sgd_fp32_master(1.0, 1e-3, 1.0, 100)
