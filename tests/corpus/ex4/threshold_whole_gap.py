"""The threshold is the whole gap below w, not half of it.

loses: rounding_threshold_matches_bf16_spacing: That is the whole gap
"""
import jax.numpy as jnp
import numpy as np

from reference.ex4_master_weights import sgd_bf16, sgd_fp32_master, w_bf16, w_master  # noqa: F401  right as they are


def bf16_rounding_threshold(w):
    stored = np.asarray(w, jnp.bfloat16)
    return float(stored) - float(np.nextafter(stored, np.zeros_like(stored)))
