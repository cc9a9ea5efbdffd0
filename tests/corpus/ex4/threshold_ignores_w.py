"""The threshold is the value for w = 1.0 whatever w is.

loses: rounding_threshold_matches_bf16_spacing: the value for w = 1.0 every time
"""
import jax.numpy as jnp


def sgd_bf16(w0, lr, grad, steps):
    w = jnp.bfloat16(w0)
    for _ in range(steps):
        w = (w - lr * grad).astype(jnp.bfloat16)
    return w


def sgd_fp32_master(w0, lr, grad, steps):
    w = jnp.float32(w0)
    for _ in range(steps):
        w = w - jnp.float32(lr * grad)
    return w


def bf16_rounding_threshold(w):
    return 2.0 ** -9

w_bf16 = sgd_bf16(1.0, 1e-3, 1.0, 100)
w_master = sgd_fp32_master(1.0, 1e-3, 1.0, 100)
