"""The 'master' weight is kept in bf16 too.

loses: master_result_is_float32: has dtype bfloat16, expected float32
loses: master_matches_float32_simulation: the master weight is being rounded to bf16
"""
import jax.numpy as jnp


def sgd_bf16(w0, lr, grad, steps):
    w = jnp.bfloat16(w0)
    for _ in range(steps):
        w = (w - lr * grad).astype(jnp.bfloat16)
    return w


def sgd_fp32_master(w0, lr, grad, steps):
    w = jnp.bfloat16(w0)
    for _ in range(steps):
        w = (w - lr * grad).astype(jnp.bfloat16)
    return w


def bf16_rounding_threshold(w):
    stored = jnp.asarray(w, jnp.bfloat16)
    below = jnp.nextafter(stored, jnp.asarray(0, jnp.bfloat16))
    return float(stored.astype(jnp.float32) - below.astype(jnp.float32)) / 2


w_bf16 = sgd_bf16(1.0, 1e-3, 1.0, 100)
w_master = sgd_fp32_master(1.0, 1e-3, 1.0, 100)
