"""Right numbers, but a Python for-loop over micro-batches instead of lax.scan.

loses: accumulates_with_lax_scan: tracing unrolls the loop
loses: nothing_outside_the_scan_touches_the_whole_batch: tracing unrolls the loop
technique: none (every number right, the technique not doing the work)
"""
import jax
import jax.numpy as jnp

from reference.ex1_token_accumulation import tok_loss_sum_count  # right as they are


def accum_token_weighted(w, x, y, m, n_micro):
    size = x.shape[0] // n_micro
    g_sum, n_sum = jnp.zeros_like(w), 0.0
    for i in range(n_micro):
        s = slice(i * size, (i + 1) * size)
        g, n = jax.grad(tok_loss_sum_count, has_aux=True)(w, x[s], y[s], m[s])
        g_sum, n_sum = g_sum + g, n_sum + n
    return g_sum / n_sum
