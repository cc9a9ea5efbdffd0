"""The scan counts the tokens in its carry, but hands every micro-batch's gradient back as its ys,
and they are summed after it: right numbers, n_micro gradients in memory at once.

loses: accumulates_with_lax_scan: the gradients are stacked
"""
import jax
import jax.numpy as jnp
from jax import lax

from reference.ex1_token_accumulation import tok_loss_sum_count  # noqa: F401  right as it is


def accum_token_weighted(w, x, y, m, n_micro):
    split = lambda a: a.reshape(n_micro, -1, *a.shape[1:])  # noqa: E731

    def body(count, micro):
        g, n = jax.grad(tok_loss_sum_count, has_aux=True)(w, *micro)
        return count + n, g

    count, grads = lax.scan(body, jnp.zeros(()), (split(x), split(y), split(m)))
    return grads.sum(axis=0) / count
