"""Right: both schemes count their steps in a lax.while_loop, the bf16 step written with
lax.convert_element_type; the threshold steps from the stored value toward -infinity (for a
positive number, the same neighbour as toward zero). The float32 update is float32(lr) times
float32(grad), formed in float32.
"""
import jax.numpy as jnp
import numpy as np
from jax import lax


def _steps(w, update, steps, dtype):
    def body(state):
        i, w = state
        return i + 1, lax.convert_element_type(w.astype(jnp.float32) - update, dtype)

    return lax.while_loop(lambda state: state[0] < steps, body, (0, w))[1]


def sgd_bf16(w0, lr, grad, steps):
    return _steps(jnp.asarray(w0, jnp.bfloat16), jnp.float32(lr * grad), steps, jnp.bfloat16)


def sgd_fp32_master(w0, lr, grad, steps):
    return _steps(jnp.asarray(w0, jnp.float32), jnp.float32(lr) * jnp.float32(grad), steps, jnp.float32)


def bf16_rounding_threshold(w):
    stored = np.asarray(w, jnp.bfloat16)
    below = np.nextafter(stored, np.asarray(-np.inf, jnp.bfloat16))
    return (float(stored) - float(below)) / 2


w_bf16 = sgd_bf16(1.0, 1e-3, 1.0, 100)
w_master = sgd_fp32_master(1.0, 1e-3, 1.0, 100)
