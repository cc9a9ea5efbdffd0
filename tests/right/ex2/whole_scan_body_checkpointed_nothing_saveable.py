"""Right: the whole outer scan body is one jax.checkpoint (so the group's scan sits directly in it),
with the policy named explicitly as jax.checkpoint_policies.nothing_saveable, which is what the
default does; the weights split into groups with jax.tree.map over the params dict.
"""

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax


def layer(x, w):
    return x + jnp.tanh(x @ w), None


def grouped_loss(params, x, k=None):
    L = params["w"].shape[0]
    if k is None:
        x, _ = lax.scan(layer, x, params["w"])
        return jnp.mean(x ** 2)
    grouped = jax.tree.map(lambda a: a.reshape(L // k, k, *a.shape[1:]), params)

    @partial(jax.checkpoint, policy=jax.checkpoint_policies.nothing_saveable)
    def body(x, group):
        x, _ = lax.scan(layer, x, group["w"])
        return x, None

    x, _ = lax.scan(body, x, grouped)
    return jnp.mean(x ** 2)


def temp_memory_bytes(params, x, k=None):
    lowered = jax.jit(jax.grad(grouped_loss), static_argnums=2).lower(params, x, k)
    return int(lowered.compile().memory_analysis().temp_size_in_bytes)


def best_group_size(params, x):
    L = params["w"].shape[0]
    best_k, best = None, None
    for k in reversed([d for d in range(1, L + 1) if L % d == 0]):
        size = temp_memory_bytes(params, x, k)
        if best is None or size <= best:
            best_k, best = k, size
    return best_k
