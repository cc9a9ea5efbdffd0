"""Exercise 2 without the technique: every number right, no checkpoint. grouped_loss never
checkpoints, while temp_memory_bytes and best_group_size measure a correct grouped checkpoint
kept out of sight (as tests/corpus/ex2/no_checkpoint_numbers_right.py does). Graded honestly it
scores at most half."""
from functools import partial

import jax
import jax.numpy as jnp
from jax import lax


def layer(x, w):
    return x + jnp.tanh(x @ w), None


def grouped_loss(params, x, k=None):
    x, _ = lax.scan(layer, x, params["w"])
    return jnp.mean(x ** 2)


def _hidden_grouped_loss(params, x, k=None):
    w = params["w"]
    if k is None:
        return grouped_loss(params, x)
    groups = w.reshape(w.shape[0] // k, k, *w.shape[1:])

    @jax.checkpoint
    def group(x, group_w):
        return lax.scan(layer, x, group_w)[0]

    x, _ = lax.scan(lambda x, g: (group(x, g), None), x, groups)
    return jnp.mean(x ** 2)


def temp_memory_bytes(params, x, k=None):
    compiled = jax.jit(jax.grad(partial(_hidden_grouped_loss, k=k))).lower(params, x).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


def best_group_size(params, x):
    n = params["w"].shape[0]
    return min((k for k in range(1, n + 1) if n % k == 0), key=lambda k: temp_memory_bytes(params, x, k))
