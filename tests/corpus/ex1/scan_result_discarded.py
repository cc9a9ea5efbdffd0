"""A real accumulating scan whose result is never used: dead code beside a full-batch gradient.

loses: accumulates_with_lax_scan: it is dead code
technique: none (every number right, the technique not doing the work)
"""
import jax
import jax.numpy as jnp

from reference.ex1_token_accumulation import accum_token_weighted as scanned, tok_loss_sum_count


def accum_token_weighted(w, x, y, m, n_micro):
    scanned(w, x, y, m, n_micro)
    return jax.grad(lambda w: tok_loss_sum_count(w, x, y, m)[0] / jnp.sum(m))(w)
