"""Right: every rounding to bf16 is written out by hand, ties to even. In scheme (a) on the
float32 bit pattern (add 0x7FFF plus the last kept bit, then cut the low 16 bits: the classic
round-to-nearest-even), in the threshold with Python's round(), which rounds ties to even, on the
spacing of w's power of two.
"""
import math

import jax.numpy as jnp
from jax import lax

SUBNORMAL_SPACING = 2.0**-133


def to_bf16(x):
    bits = lax.bitcast_convert_type(jnp.asarray(x, jnp.float32), jnp.uint32)
    kept_lsb = (bits >> 16) & jnp.uint32(1)
    rounded = (bits + jnp.uint32(0x7FFF) + kept_lsb) & jnp.uint32(0xFFFF0000)
    return lax.bitcast_convert_type(rounded, jnp.float32).astype(jnp.bfloat16)  # exact: the low bits are 0


def sgd_bf16(w0, lr, grad, steps):
    update = jnp.float32(lr * grad)
    return lax.fori_loop(0, steps, lambda _, w: to_bf16(w.astype(jnp.float32) - update), to_bf16(w0))


def sgd_fp32_master(w0, lr, grad, steps):
    update = jnp.float32(lr * grad)
    return lax.fori_loop(0, steps, lambda _, w: w - update, jnp.float32(w0))


def spacing_at(x):
    """The bf16 spacing among the numbers of x's power of two (8 significant bits), or subnormal."""
    return max(math.ldexp(1.0, math.frexp(x)[1] - 8), SUBNORMAL_SPACING)


def bf16_rounding_threshold(w):
    step = spacing_at(w)
    stored = round(w / step) * step  # round() rounds ties to even; w / step is exact
    fraction, exponent = math.frexp(stored)
    gap = spacing_at(stored) / 2 if fraction == 0.5 else spacing_at(stored)
    return max(gap, SUBNORMAL_SPACING) / 2


w_bf16 = sgd_bf16(1.0, 1e-3, 1.0, 100)
w_master = sgd_fp32_master(1.0, 1e-3, 1.0, 100)
