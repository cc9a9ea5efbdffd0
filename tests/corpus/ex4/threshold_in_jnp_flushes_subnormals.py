"""The gap computed with jnp.nextafter: right for normal numbers, but XLA on CPU flushes subnormal
numbers to zero, so every subnormal w gets 0 (and the smallest normal gets 2**-127).

loses: rounding_threshold_below_the_smallest_normal: flushed to zero
"""
import jax.numpy as jnp

from reference.ex4_master_weights import sgd_bf16, sgd_fp32_master, w_bf16, w_master  # noqa: F401  right as they are


def bf16_rounding_threshold(w):
    stored = jnp.asarray(w, jnp.bfloat16)
    below = jnp.nextafter(stored, jnp.asarray(0, jnp.bfloat16))
    return float(stored.astype(jnp.float32) - below.astype(jnp.float32)) / 2
