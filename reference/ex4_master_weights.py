"""Exercise 4, reference solution: bf16-stored parameter vs fp32 master weight."""

import jax.numpy as jnp
import numpy as np
from jax import lax


def sgd_bf16(w0, lr, grad, steps):
    def step(_, w):
        return (w - lr * grad).astype(jnp.bfloat16)  # stored in bf16 after every step

    return lax.fori_loop(0, steps, step, jnp.asarray(w0, jnp.bfloat16))


def sgd_fp32_master(w0, lr, grad, steps):
    def step(_, w):
        return w - jnp.float32(lr * grad)

    return lax.fori_loop(0, steps, step, jnp.asarray(w0, jnp.float32))


def bf16_rounding_threshold(w):
    # NumPy (ml_dtypes), not jnp: XLA on CPU would flush subnormal values to zero.
    stored = np.asarray(w, jnp.bfloat16)
    below = np.nextafter(stored, np.zeros_like(stored))  # next smaller bf16 number
    return (float(stored) - float(below)) / 2


w_bf16 = sgd_bf16(1.0, 1e-3, 1.0, 100)
w_master = sgd_fp32_master(1.0, 1e-3, 1.0, 100)
