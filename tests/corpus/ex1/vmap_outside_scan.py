"""The micro-batch gradients are computed all at once with vmap outside the scan; the scan only adds
them up, so the whole batch's work happens at once.

loses: accumulates_with_lax_scan: never receives the batch
technique: none (every number right, the technique not doing the work)
"""
import jax
import jax.numpy as jnp
from jax import lax

from reference.ex1_token_accumulation import tok_loss_sum_count


def accum_token_weighted(w, x, y, m, n_micro):
    split = lambda a: a.reshape(n_micro, -1, *a.shape[1:])  # noqa: E731
    grads, counts = jax.vmap(lambda *mb: jax.grad(tok_loss_sum_count, has_aux=True)(w, *mb))(split(x), split(y), split(m))
    (g, n), _ = lax.scan(lambda c, t: ((c[0] + t[0], c[1] + t[1]), None), (jnp.zeros_like(w), 0.0), (grads, counts))
    return g / n
