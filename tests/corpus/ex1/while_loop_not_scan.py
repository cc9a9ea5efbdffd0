"""The accumulation is right, but in a lax.while_loop, whose trip count JAX does not know: the
exercise asks for lax.scan, which a while loop is not (a fori_loop with Python-int bounds is one).

loses: accumulates_with_lax_scan: a lax.while_loop
"""
import jax
import jax.numpy as jnp
from jax import lax

from reference.ex1_token_accumulation import tok_loss_sum_count  # noqa: F401  right as it is


def accum_token_weighted(w, x, y, m, n_micro):
    batch = [a.reshape(n_micro, -1, *a.shape[1:]) for a in (x, y, m)]

    def body(carry):
        i, g_sum, count = carry
        g, n = jax.grad(tok_loss_sum_count, has_aux=True)(w, *(a[i] for a in batch))
        return i + 1, g_sum + g, count + n

    _, g_sum, count = lax.while_loop(lambda c: c[0] < batch[0].shape[0], body, (0, jnp.zeros_like(w), jnp.zeros(())))
    return g_sum / count
