"""Right: each step is taken in Python floats (float64) and rounded straight to bf16 (scheme a)
or float32 (scheme b), once per step: no float32 in between for scheme (a). The threshold compares
the stored value with the bf16 number one step below it, found by subtracting one from its bits
(a signed 16-bit view of a 1-element array).
"""
import jax.numpy as jnp
import numpy as np


def sgd_bf16(w0, lr, grad, steps):
    w = float(jnp.bfloat16(w0))
    for _ in range(steps):
        w = float(jnp.bfloat16(w - lr * grad))
    return jnp.bfloat16(w)


def sgd_fp32_master(w0, lr, grad, steps):
    w, update = float(np.float32(w0)), float(np.float32(lr * grad))
    for _ in range(steps):
        w = float(np.float32(w - update))  # the float64 difference of two float32 numbers is exact here
    return jnp.float32(w)


def bf16_rounding_threshold(w):
    stored = np.asarray([w], jnp.bfloat16)
    bits = stored.view(np.int16)
    below = (bits - 1).view(jnp.bfloat16)
    return (stored.astype(np.float64) - below.astype(np.float64)).item() / 2


w_bf16 = sgd_bf16(1.0, 1e-3, 1.0, 100)
w_master = sgd_fp32_master(1.0, 1e-3, 1.0, 100)
