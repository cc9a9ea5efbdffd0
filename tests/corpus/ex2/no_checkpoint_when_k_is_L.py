"""k = L runs the layers in one scan with no checkpoint at all (it saves nothing anyway, so why bother?).

loses: one_checkpoint_per_group_inside_a_scan: found no checkpoint at all
"""
from jax import lax
import jax.numpy as jnp

from reference.ex2_sqrt_checkpointing import grouped_loss as asked, layer, temp_memory_bytes, best_group_size  # right as they are


def grouped_loss(params, x, k=None):
    if k == params["w"].shape[0]:
        x, _ = lax.scan(layer, x, params["w"])
        return jnp.mean(x ** 2)
    return asked(params, x, k)
