"""Steps scheme (a) in bf16 correctly, but hands the result back as float32.

loses: bf16_result_is_bfloat16: has dtype float32, expected bfloat16
"""
import jax.numpy as jnp

from reference.ex4_master_weights import bf16_rounding_threshold, sgd_fp32_master, w_master  # noqa: F401  right as they are


def sgd_bf16(w0, lr, grad, steps):
    w = jnp.bfloat16(w0)
    for _ in range(steps):
        w = (w - lr * grad).astype(jnp.bfloat16)
    return w.astype(jnp.float32)


w_bf16 = sgd_bf16(1.0, 1e-3, 1.0, 100)
