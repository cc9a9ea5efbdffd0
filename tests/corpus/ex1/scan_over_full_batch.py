"""A scan of length n_micro whose every step recomputes the full-batch gradient, then averages:
right numbers and a scan, but nothing is split into micro-batches.

loses: accumulates_with_lax_scan: every step gets the whole x
technique: none (every number right, the technique not doing the work)
"""
import jax
import jax.numpy as jnp
from jax import lax

from reference.ex1_token_accumulation import tok_loss_sum_count  # right as they are


def accum_token_weighted(w, x, y, m, n_micro):
    def mean_loss(w):
        s, n = tok_loss_sum_count(w, x, y, m)
        return s / n

    def body(acc, _):
        return acc + jax.grad(mean_loss)(w), None

    total, _ = lax.scan(body, jnp.zeros_like(w), None, length=n_micro)
    return total / n_micro
