"""Forgets the mask in the loss sum: padded tokens add to the loss (the count is right).

loses: loss_sum_counts_only_valid_tokens: includes the padded positions
"""
import jax
import jax.numpy as jnp
from jax import lax


def tok_loss_sum_count(w, x, y, m):
    per_token = (jnp.tanh(x @ w) - y) ** 2
    return jnp.sum(per_token), jnp.sum(m)


def split(a, n_micro):
    return a.reshape(n_micro, a.shape[0] // n_micro, *a.shape[1:])


def accum_token_weighted(w, x, y, m, n_micro):
    def body(carry, micro):
        g_sum, n_sum = carry
        g, n = jax.grad(tok_loss_sum_count, has_aux=True)(w, *micro)
        return (g_sum + g, n_sum + n), None

    (g, n), _ = lax.scan(body, (jnp.zeros_like(w), 0.0), (split(x, n_micro), split(y, n_micro), split(m, n_micro)))
    return g / n
