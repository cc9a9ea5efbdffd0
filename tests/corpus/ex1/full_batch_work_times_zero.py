"""The scan does the work, but a full-batch gradient is computed beside it and added times 0:
the memory the accumulation exists to save is spent anyway.

loses: nothing_outside_the_scan_touches_the_whole_batch: a matrix product (@, jnp.dot, jnp.einsum) on the whole x
"""
import jax
import jax.numpy as jnp

from reference.ex1_token_accumulation import accum_token_weighted as scanned, tok_loss_sum_count


def accum_token_weighted(w, x, y, m, n_micro):
    full = jax.grad(lambda w: tok_loss_sum_count(w, x, y, m)[0] / jnp.sum(m))(w)
    return scanned(w, x, y, m, n_micro) + 0 * full
