"""Groups the layers with two nested scans but never calls jax.checkpoint; temp_memory_bytes and
best_group_size then measure its own flat curve.

loses: one_checkpoint_per_group_inside_a_scan: found no checkpoint at all
loses: checkpoint_policy_saves_nothing: holds no jax.checkpoint for any k
loses: gradient_memory_matches_the_grouped_checkpoint: No k saves memory against no checkpoint
loses: temp_memory_bytes_matches_measurement: does not checkpoint its groups
loses: best_group_size_is_the_measured_minimum: the least the grader measured
"""
from functools import partial

import jax
import jax.numpy as jnp
from jax import lax

from reference.ex2_sqrt_checkpointing import layer  # right as they are


def grouped_loss(params, x, k=None):
    w = params["w"]
    if k is None:
        x, _ = lax.scan(layer, x, w)
        return jnp.mean(x ** 2)
    L = w.shape[0]

    def group(x, gw):
        x, _ = lax.scan(layer, x, gw)
        return x, None

    x, _ = lax.scan(group, x, w.reshape(L // k, k, *w.shape[1:]))
    return jnp.mean(x ** 2)


def temp_memory_bytes(params, x, k=None):
    compiled = jax.jit(jax.grad(partial(grouped_loss, k=k))).lower(params, x).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


def best_group_size(params, x):
    L = params["w"].shape[0]
    return min((k for k in range(1, L + 1) if L % k == 0), key=lambda k: temp_memory_bytes(params, x, k))
