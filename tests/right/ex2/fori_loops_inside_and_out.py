"""Right: both loops are lax.fori_loop with Python-int bounds (which JAX runs as scans): the outer
one over the L/k groups carries x, the inner one, inside the jax.checkpoint, indexes the group's
k weights with a traced index. k=None is one fori_loop over the layers.
"""

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax


def grouped_loss(params, x, k=None):
    w = params["w"]
    L = w.shape[0]
    if k is None:
        x = lax.fori_loop(0, L, lambda l, x: x + jnp.tanh(x @ w[l]), x)
        return jnp.mean(x ** 2)
    groups = w.reshape(L // k, k, *w.shape[1:])

    @jax.checkpoint
    def group(x, gw):
        return lax.fori_loop(0, k, lambda l, x: x + jnp.tanh(x @ gw[l]), x)

    x = lax.fori_loop(0, L // k, lambda g, x: group(x, groups[g]), x)
    return jnp.mean(x ** 2)


def temp_memory_bytes(params, x, k=None):
    compiled = jax.jit(jax.grad(partial(grouped_loss, k=k))).lower(params, x).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


def best_group_size(params, x):
    L = params["w"].shape[0]
    sizes = {k: temp_memory_bytes(params, x, k) for k in range(1, L + 1) if L % k == 0}
    return min(sizes, key=sizes.get)
