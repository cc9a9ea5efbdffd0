"""A real accumulating scan whose result is selected away: jnp.where(False, scan, full-batch gradient).

loses: accumulates_with_lax_scan: a decoy
technique: none (every number right, the technique not doing the work)
"""
import jax
import jax.numpy as jnp
from jax import lax

from reference.ex1_token_accumulation import accum_token_weighted as scanned, tok_loss_sum_count


def accum_token_weighted(w, x, y, m, n_micro):
    full = jax.grad(lambda w: tok_loss_sum_count(w, x, y, m)[0] / jnp.sum(m))(w)
    return jnp.where(False, scanned(w, x, y, m, n_micro), full)
