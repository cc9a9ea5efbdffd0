"""Exercise 2, reference solution: one jax.checkpoint per group of k layers, two nested scans."""

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax


def layer(x, w):
    # Without a checkpoint, the backward pass keeps x and 1 - tanh(x @ w)**2 of every layer, each the size of x.
    return x + jnp.tanh(x @ w), None


def grouped_loss(params, x, k=None):
    w = params["w"]
    if k is None:
        x, _ = lax.scan(layer, x, w)
        return jnp.mean(x ** 2)
    n_layers = w.shape[0]
    if n_layers % k:
        raise ValueError(f"k={k} does not divide the number of layers {n_layers}")
    groups = w.reshape(n_layers // k, k, *w.shape[1:])

    @jax.checkpoint  # keeps only the group's input; the group's k layers rerun in the backward pass
    def group(x, group_w):
        x, _ = lax.scan(layer, x, group_w)
        return x

    x, _ = lax.scan(lambda x, group_w: (group(x, group_w), None), x, groups)
    return jnp.mean(x ** 2)


def temp_memory_bytes(params, x, k=None):
    compiled = jax.jit(jax.grad(partial(grouped_loss, k=k))).lower(params, x).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


def best_group_size(params, x):
    n_layers = params["w"].shape[0]
    divisors = [k for k in range(1, n_layers + 1) if n_layers % k == 0]
    return min(divisors, key=lambda k: temp_memory_bytes(params, x, k))
