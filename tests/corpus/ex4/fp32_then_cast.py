"""Scheme (a) computed in fp32 and cast to bf16 only at the end.

loses: chapter_case_values: rounded to bf16 once at the end
"""
import jax.numpy as jnp


def sgd_bf16(w0, lr, grad, steps):
    w = jnp.float32(w0)
    for _ in range(steps):
        w = w - jnp.float32(lr * grad)
    return w.astype(jnp.bfloat16)


def sgd_fp32_master(w0, lr, grad, steps):
    w = jnp.float32(w0)
    for _ in range(steps):
        w = w - jnp.float32(lr * grad)
    return w


def bf16_rounding_threshold(w):
    stored = jnp.asarray(w, jnp.bfloat16)
    below = jnp.nextafter(stored, jnp.asarray(0, jnp.bfloat16))
    return float(stored.astype(jnp.float32) - below.astype(jnp.float32)) / 2


w_bf16 = sgd_bf16(1.0, 1e-3, 1.0, 100)
w_master = sgd_fp32_master(1.0, 1e-3, 1.0, 100)
