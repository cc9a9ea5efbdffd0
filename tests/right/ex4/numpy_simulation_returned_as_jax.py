"""Right: both schemes run in NumPy (ml_dtypes' bfloat16 and np.float32, each step rounded as
JAX would) and the results are handed back as JAX scalars of the right dtypes; the threshold is
the bf16 spacing below the stored value measured with np.nextafter toward zero, halved.
"""
import jax.numpy as jnp
import ml_dtypes
import numpy as np

BF16 = ml_dtypes.bfloat16


def sgd_bf16(w0, lr, grad, steps):
    w = BF16(w0)
    update = np.float32(lr * grad)
    for _ in range(steps):
        w = BF16(np.float32(w) - update)
    return jnp.asarray(w, jnp.bfloat16)


def sgd_fp32_master(w0, lr, grad, steps):
    w, update = np.float32(w0), np.float32(lr * grad)
    for _ in range(steps):
        w = np.float32(w - update)
    return jnp.asarray(w, jnp.float32)


def bf16_rounding_threshold(w):
    stored = BF16(w)
    return 0.5 * (float(stored) - float(np.nextafter(stored, BF16(0))))


w_bf16 = sgd_bf16(1.0, 1e-3, 1.0, 100)
w_master = sgd_fp32_master(1.0, 1e-3, 1.0, 100)
