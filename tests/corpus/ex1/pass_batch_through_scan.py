"""The scan only hands the micro-batches back (times 1.0); the gradient is computed on them after it.

loses: accumulates_with_lax_scan: the batch is passed through the scan
technique: none (every number right, the technique not doing the work)
"""
import jax
import jax.numpy as jnp
from jax import lax

from reference.ex1_token_accumulation import tok_loss_sum_count


def accum_token_weighted(w, x, y, m, n_micro):
    split = lambda a: a.reshape(n_micro, -1, *a.shape[1:])  # noqa: E731
    _, (xs, ys, ms) = lax.scan(lambda c, mb: (c, tuple(a * 1.0 for a in mb)), 0.0, (split(x), split(y), split(m)))
    xs, ys, ms = xs.reshape(x.shape), ys.reshape(y.shape), ms.reshape(m.shape)
    return jax.grad(lambda w: tok_loss_sum_count(w, xs, ys, ms)[0] / jnp.sum(ms))(w)
