"""Carries a running token-weighted *mean* through the scan: right, except that it divides by the
tokens seen so far, which is 0/0 while the first micro-batches are empty.

loses: gradient_with_empty_micro_batches: A running mean divides by the tokens seen so far
"""
import jax
import jax.numpy as jnp
from jax import lax

from reference.ex1_token_accumulation import tok_loss_sum_count


def accum_token_weighted(w, x, y, m, n_micro):
    split = lambda a: a.reshape(n_micro, -1, *a.shape[1:])  # noqa: E731

    def body(carry, micro):
        mean, seen = carry
        g, n = jax.grad(tok_loss_sum_count, has_aux=True)(w, *micro)
        seen = seen + n
        return (mean + (g - n * mean) / seen, seen), None

    (mean, _), _ = lax.scan(body, (jnp.zeros_like(w), 0.0), (split(x), split(y), split(m)))
    return mean
