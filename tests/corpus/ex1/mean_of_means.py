"""Averages the micro-batches' own per-token means (the chapter's 'wrong way').

loses: gradient_matches_full_batch: plain average of the micro-batches' own per-token means
loses: gradient_with_empty_micro_batches: one with none gives 0/0
"""
import jax
import jax.numpy as jnp
from jax import lax

from reference.ex1_token_accumulation import tok_loss_sum_count  # right as they are


def split(a, n_micro):
    return a.reshape(n_micro, a.shape[0] // n_micro, *a.shape[1:])


def accum_token_weighted(w, x, y, m, n_micro):
    def mean_loss(w, x, y, m):
        s, n = tok_loss_sum_count(w, x, y, m)
        return s / n

    def body(acc, micro):
        return acc + jax.grad(mean_loss)(w, *micro), None

    total, _ = lax.scan(body, jnp.zeros_like(w), (split(x, n_micro), split(y, n_micro), split(m, n_micro)))
    return total / n_micro
