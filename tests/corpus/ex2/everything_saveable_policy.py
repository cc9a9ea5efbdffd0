"""One checkpoint per group, as asked, but with policy=everything_saveable: nothing is recomputed.

loses: checkpoint_policy_saves_nothing: policy=everything_saveable): it saves every intermediate value
loses: gradient_memory_matches_the_grouped_checkpoint: expected
loses: temp_memory_bytes_matches_measurement: expected about
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

    @partial(jax.checkpoint, policy=jax.checkpoint_policies.everything_saveable)
    def group(x, gw):
        x, _ = lax.scan(layer, x, gw)
        return x

    x, _ = lax.scan(lambda x, gw: (group(x, gw), None), x, w.reshape(L // k, k, *w.shape[1:]))
    return jnp.mean(x ** 2)


def temp_memory_bytes(params, x, k=None):
    compiled = jax.jit(jax.grad(partial(grouped_loss, k=k))).lower(params, x).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


def best_group_size(params, x):
    L = params["w"].shape[0]
    return min((k for k in range(1, L + 1) if L % k == 0), key=lambda k: temp_memory_bytes(params, x, k))
