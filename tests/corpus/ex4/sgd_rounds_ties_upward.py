"""Rounds each step to the bf16 grid by hand with floor(x / step + 0.5) * step, the step read off
the new value's power of two: to nearest, but an exact tie goes up, toward +infinity, which for a
negative w is toward zero. Only ties of negative values tell it from ties away from zero.

loses: bf16_matches_step_by_step_rounding: rounds ties upward
"""
import jax.numpy as jnp
from jax import lax

from reference.ex4_master_weights import bf16_rounding_threshold, sgd_fp32_master, w_master  # noqa: F401  right as they are


def to_bf16(x):
    x = jnp.asarray(x, jnp.float32)
    step = jnp.ldexp(jnp.float32(1), jnp.frexp(x)[1] - 8)  # the bf16 spacing at x's power of two
    return (jnp.floor(x / step + 0.5) * step).astype(jnp.bfloat16)


def sgd_bf16(w0, lr, grad, steps):
    return lax.fori_loop(0, steps, lambda _, w: to_bf16(w.astype(jnp.float32) - jnp.float32(lr * grad)), to_bf16(w0))


w_bf16 = sgd_bf16(1.0, 1e-3, 1.0, 100)
