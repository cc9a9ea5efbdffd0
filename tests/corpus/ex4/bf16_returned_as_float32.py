"""Steps scheme (a) in bf16 correctly, but hands the result back as float32.

loses: bf16_result_is_bfloat16: has dtype float32, expected bfloat16
"""
import jax.numpy as jnp


def sgd_bf16(w0, lr, grad, steps):
    w = jnp.bfloat16(w0)
    for _ in range(steps):
        w = (w - lr * grad).astype(jnp.bfloat16)
    return w.astype(jnp.float32)


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
