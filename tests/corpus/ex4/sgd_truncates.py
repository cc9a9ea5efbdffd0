"""Stores each step in bf16 by cutting the float32's low 16 bits (how early bf16 conversions did
it): rounding toward zero, not to nearest. 1 - 1e-3 is cut to 1 - 2**-8.

loses: chapter_case_values: truncates
loses: bf16_matches_step_by_step_rounding: truncates
"""
import jax.numpy as jnp
from jax import lax

from reference.ex4_master_weights import bf16_rounding_threshold, sgd_fp32_master, w_master  # noqa: F401  right as they are


def to_bf16(x):
    bits = lax.bitcast_convert_type(jnp.asarray(x, jnp.float32), jnp.uint32) & jnp.uint32(0xFFFF0000)
    return lax.bitcast_convert_type(bits, jnp.float32).astype(jnp.bfloat16)


def sgd_bf16(w0, lr, grad, steps):
    return lax.fori_loop(0, steps, lambda _, w: to_bf16(w.astype(jnp.float32) - jnp.float32(lr * grad)), to_bf16(w0))


w_bf16 = sgd_bf16(1.0, 1e-3, 1.0, 100)
