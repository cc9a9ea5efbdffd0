"""A checkpoint on every layer, whatever k is.

loses: one_checkpoint_per_group_inside_a_scan: a checkpoint on every layer whatever k
loses: gradient_memory_matches_the_grouped_checkpoint: a checkpoint on every layer whatever k is
"""
from functools import partial

import jax
import jax.numpy as jnp
from jax import lax

from reference.ex2_sqrt_checkpointing import layer  # right as they are


def grouped_loss(params, x, k=None):
    step = layer if k is None else jax.checkpoint(layer)
    x, _ = lax.scan(step, x, params["w"])
    return jnp.mean(x ** 2)


def temp_memory_bytes(params, x, k=None):
    compiled = jax.jit(jax.grad(partial(grouped_loss, k=k))).lower(params, x).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


def best_group_size(params, x):
    L = params["w"].shape[0]
    return min((k for k in range(1, L + 1) if L % k == 0), key=lambda k: temp_memory_bytes(params, x, k))
