"""Right: one jitted SGD function with `steps` static, the stored dtype a static argument too,
and each scheme a functools.partial of it; the loop body is a closure over the update. The
threshold halves the distance to the neighbour below, found with np.nextafter on a 0-d bf16 array.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


@functools.partial(jax.jit, static_argnames=("steps", "dtype"))
def _sgd(w0, update, *, steps, dtype):
    def step(_, w):
        return (w.astype(jnp.float32) - update).astype(dtype)

    return lax.fori_loop(0, steps, step, w0.astype(dtype))


def _scheme(dtype):
    def sgd(w0, lr, grad, steps):
        return _sgd(jnp.asarray(w0, dtype), jnp.float32(lr * grad), steps=steps, dtype=dtype)

    return sgd


sgd_bf16 = _scheme(jnp.bfloat16)
sgd_fp32_master = _scheme(jnp.float32)


def bf16_rounding_threshold(w):
    stored = np.array(w, dtype=jnp.bfloat16)
    below = np.nextafter(stored, np.zeros((), jnp.bfloat16))
    return float(np.subtract(stored, below, dtype=np.float64)) / 2  # exact in float64


w_bf16 = sgd_bf16(1.0, 1e-3, 1.0, 100)
w_master = sgd_fp32_master(1.0, 1e-3, 1.0, 100)
