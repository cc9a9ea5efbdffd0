"""A decoy: the grouped checkpoint is computed, multiplied by zero and added to a plain network.

loses: one_checkpoint_per_group_inside_a_scan: outside any checkpoint
"""
import jax.numpy as jnp
from jax import lax

from reference.ex2_sqrt_checkpointing import grouped_loss as asked, layer, temp_memory_bytes, best_group_size  # right as they are


def grouped_loss(params, x, k=None):
    if k is None:
        return asked(params, x)
    plain, _ = lax.scan(layer, x, params["w"])
    return jnp.mean(plain ** 2) + 0.0 * asked(params, x, k)
