"""Scheme (a) computed in fp32 and cast to bf16 only at the end.

loses: chapter_case_values: rounded to bf16 once at the end
"""
import jax.numpy as jnp

from reference.ex4_master_weights import bf16_rounding_threshold, sgd_fp32_master, w_master  # noqa: F401  right as they are


def sgd_bf16(w0, lr, grad, steps):
    w = jnp.float32(w0)
    for _ in range(steps):
        w = w - jnp.float32(lr * grad)
    return w.astype(jnp.bfloat16)


w_bf16 = sgd_bf16(1.0, 1e-3, 1.0, 100)
