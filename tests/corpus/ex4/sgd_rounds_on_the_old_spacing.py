"""Rounds w - lr*grad to the bf16 spacing of w *before* the step (ties to even), then stores it:
right while w stays within one power of two, wrong once it crosses one, where the spacing halves
or doubles.

loses: bf16_matches_step_by_step_rounding: the spacing of w before the step
"""
import jax.numpy as jnp
from jax import lax

from reference.ex4_master_weights import bf16_rounding_threshold, sgd_fp32_master, w_master  # noqa: F401  right as they are


def sgd_bf16(w0, lr, grad, steps):
    def step(_, w):
        w = w.astype(jnp.float32)
        spacing = jnp.ldexp(jnp.float32(1), jnp.frexp(w)[1] - 8)  # bf16's spacing at w's power of two
        return (jnp.round((w - jnp.float32(lr * grad)) / spacing) * spacing).astype(jnp.bfloat16)

    return lax.fori_loop(0, steps, step, jnp.asarray(w0, jnp.bfloat16))


w_bf16 = sgd_bf16(1.0, 1e-3, 1.0, 100)
