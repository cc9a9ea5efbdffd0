"""tok_loss_sum_count returns the per-token mean instead of the sum (accumulation is right).

loses: loss_sum_adds_up_over_batch_splits: return a sum, not a mean
"""
import jax
import jax.numpy as jnp
from jax import lax


def tok_loss_sum_count(w, x, y, m):
    per_token = (jnp.tanh(x @ w) - y) ** 2
    return jnp.sum(per_token * m) / jnp.sum(m), jnp.sum(m)


def _sum(w, x, y, m):
    return jnp.sum((jnp.tanh(x @ w) - y) ** 2 * m), jnp.sum(m)


def split(a, n_micro):
    return a.reshape(n_micro, a.shape[0] // n_micro, *a.shape[1:])


def accum_token_weighted(w, x, y, m, n_micro):
    def body(carry, micro):
        g_sum, n_sum = carry
        g, n = jax.grad(_sum, has_aux=True)(w, *micro)
        return (g_sum + g, n_sum + n), None

    (g, n), _ = lax.scan(body, (jnp.zeros_like(w), 0.0), (split(x, n_micro), split(y, n_micro), split(m, n_micro)))
    return g / n
