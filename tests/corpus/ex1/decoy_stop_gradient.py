"""A real accumulating scan added as (s - stop_gradient(s)), which is 0, to a full-batch gradient.

loses: accumulates_with_lax_scan: a decoy
technique: none (every number right, the technique not doing the work)
"""
import jax
import jax.numpy as jnp
from jax import lax

from reference.ex1_token_accumulation import accum_token_weighted as scanned, tok_loss_sum_count


def accum_token_weighted(w, x, y, m, n_micro):
    s = scanned(w, x, y, m, n_micro)
    return jax.grad(lambda w: tok_loss_sum_count(w, x, y, m)[0] / jnp.sum(m))(w) + (s - lax.stop_gradient(s))
