"""grouped_loss raises for every k (the weights are indexed with a key they do not have);
temp_memory_bytes and best_group_size are right but measure it. Their checks say they depend on
grouped_loss, which fails, and guess no hint about the measurement.

loses: loss_matches_float64_forward: your code raised KeyError
loses: temp_memory_bytes_matches_measurement: depends on `grouped_loss`, which fails
loses: best_group_size_is_the_measured_minimum: depends on `grouped_loss`, which fails
"""
from functools import partial

import jax
import jax.numpy as jnp
from jax import lax


def grouped_loss(params, x, k=None):
    w = params["weights"]
    x, _ = lax.scan(lambda x, w: (x + jnp.tanh(x @ w), None), x, w)
    return jnp.mean(x ** 2)


def temp_memory_bytes(params, x, k=None):
    compiled = jax.jit(jax.grad(partial(grouped_loss, k=k))).lower(params, x).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


def best_group_size(params, x):
    n_layers = params["w"].shape[0]
    divisors = [k for k in range(1, n_layers + 1) if n_layers % k == 0]
    return min(divisors, key=lambda k: temp_memory_bytes(params, x, k))
