"""tok_loss_sum_count raises (it sums the mask over an axis it does not have); accum_token_weighted
is right but calls it. The gradient checks cannot judge accum_token_weighted: they say they depend
on tok_loss_sum_count, which fails, and guess no hint about the gradient.

loses: loss_sum_counts_only_valid_tokens: your code raised ValueError
loses: gradient_matches_full_batch: depends on `tok_loss_sum_count`, which fails
loses: accumulates_with_lax_scan: depends on `tok_loss_sum_count`, which fails
"""
from functools import partial

import jax
import jax.numpy as jnp
from jax import lax


def tok_loss_sum_count(w, x, y, m):
    per_token = (jnp.tanh(x @ w) - y) ** 2
    return jnp.sum(per_token * m), jnp.sum(m, axis=2)


@partial(jax.jit, static_argnames="n_micro")
def accum_token_weighted(w, x, y, m, n_micro):
    def split(a):
        return a.reshape(n_micro, a.shape[0] // n_micro, *a.shape[1:])

    def body(carry, micro):
        grad, n = jax.grad(tok_loss_sum_count, has_aux=True)(w, *micro)
        return (carry[0] + grad, carry[1] + n), None

    (grad_sum, count), _ = lax.scan(body, (jnp.zeros_like(w), jnp.zeros(())), (split(x), split(y), split(m)))
    return grad_sum / count
