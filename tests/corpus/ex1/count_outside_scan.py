"""Accumulates the gradient sums in the scan, but counts the tokens on the whole mask outside it.

loses: accumulates_with_lax_scan: part of the result is computed outside the scan
loses: nothing_outside_the_scan_touches_the_whole_batch: a sum (jnp.sum) on the whole m
"""
import jax
import jax.numpy as jnp
from jax import lax

from reference.ex1_token_accumulation import tok_loss_sum_count


def accum_token_weighted(w, x, y, m, n_micro):
    split = lambda a: a.reshape(n_micro, -1, *a.shape[1:])  # noqa: E731

    def body(g_sum, micro):
        return g_sum + jax.grad(lambda w: tok_loss_sum_count(w, *micro)[0])(w), None

    g_sum, _ = lax.scan(body, jnp.zeros_like(w), (split(x), split(y), split(m)))
    return g_sum / jnp.sum(m)
