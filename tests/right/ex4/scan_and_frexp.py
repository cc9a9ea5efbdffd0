"""Right: both schemes are lax.scan loops over the step indices, scheme (a) subtracting the update
rounded to bf16 first (what JAX does for a bf16 array minus a bf16 number); the threshold reads
the stored value's power of two with math.frexp, the subnormal spacing taken as a floor.
"""
import math

import jax.numpy as jnp
import numpy as np
from jax import lax


def sgd_bf16(w0, lr, grad, steps):
    update = jnp.asarray(lr * grad, jnp.bfloat16)
    w, _ = lax.scan(lambda w, _: (w - update, None), jnp.asarray(w0, jnp.bfloat16), jnp.arange(steps))
    return w


def sgd_fp32_master(w0, lr, grad, steps):
    update = jnp.float32(lr * grad)
    w, _ = lax.scan(lambda w, _: (w - update, None), jnp.float32(w0), None, length=steps)
    return w


def bf16_rounding_threshold(w):
    stored = float(np.asarray(w, jnp.bfloat16))
    fraction, exponent = math.frexp(stored)  # stored = fraction * 2**exponent, fraction in [0.5, 1)
    gap = math.ldexp(1.0, exponent - (9 if fraction == 0.5 else 8))  # the spacing halves below a power of two
    return max(gap, 2.0**-133) / 2  # below 2**-125 every gap is the subnormal spacing


w_bf16 = sgd_bf16(1.0, 1e-3, 1.0, 100)
w_master = sgd_fp32_master(1.0, 1e-3, 1.0, 100)
