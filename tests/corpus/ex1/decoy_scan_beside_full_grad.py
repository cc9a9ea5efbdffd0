"""A decoy: a lax.scan of length n_micro evaluates the model on each micro-batch and adds its result
times 0; the answer comes from a full-batch gradient beside it, with tanh spelled 2*sigmoid(2z)-1.

loses: accumulates_with_lax_scan: a decoy
loses: nothing_outside_the_scan_touches_the_whole_batch: a decoy
technique: none (every number right, the technique not doing the work)
"""
import jax
import jax.numpy as jnp
from jax import lax

from reference.ex1_token_accumulation import tok_loss_sum_count  # noqa: F401  right as it is


def accum_token_weighted(w, x, y, m, n_micro):
    split = lambda a: a.reshape(n_micro, -1, *a.shape[1:])  # noqa: E731

    def body(total, micro):
        xs, ys, ms = micro
        return total + jnp.sum(ms * (jnp.tanh(xs @ w) - ys) ** 2), None

    decoy, _ = lax.scan(body, 0.0, (split(x), split(y), split(m)))

    def mean_loss(w):
        t = 2 * jax.nn.sigmoid(2 * (x @ w)) - 1
        return jnp.sum(m * (t - y) ** 2) / jnp.sum(m)

    return jax.grad(mean_loss)(w) + decoy * 0
