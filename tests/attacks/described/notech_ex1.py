"""Exercise 1 without the technique: every number right, a Python loop over the micro-batches
(tracing unrolls it; no lax.scan does the work). Graded honestly it earns the numeric checks only."""
import jax
import jax.numpy as jnp


def tok_loss_sum_count(w, x, y, m):
    per_token = (jnp.tanh(x @ w) - y) ** 2
    return jnp.sum(per_token * m), jnp.sum(m)


def accum_token_weighted(w, x, y, m, n_micro):
    size = x.shape[0] // n_micro
    g_sum, n_sum = jnp.zeros_like(w), 0.0
    for i in range(n_micro):
        s = slice(i * size, (i + 1) * size)
        g, n = jax.grad(tok_loss_sum_count, has_aux=True)(w, x[s], y[s], m[s])
        g_sum, n_sum = g_sum + g, n_sum + n
    return g_sum / n_sum
