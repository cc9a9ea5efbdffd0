"""Wrong: the reference's scan, but accum_token_weighted returns a PRNG key array of the
gradient's shape (its key data the gradient's bits twice), not the gradient.

3/16 at seed 20261130: every gradient check names the PRNGKeyArray it got.

loses: gradient_matches_full_batch: got PRNGKeyArray
loses: runs_under_jit: got PRNGKeyArray
"""

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax


def tok_loss_sum_count(w, x, y, m):
    per_token = (jnp.tanh(x @ w) - y) ** 2
    return jnp.sum(per_token * m), jnp.sum(m)


@partial(jax.jit, static_argnames="n_micro")
def accum_token_weighted(w, x, y, m, n_micro):
    def split(a):
        return a.reshape(n_micro, a.shape[0] // n_micro, *a.shape[1:])

    def body(carry, micro):
        grad_sum, count = carry
        grad, n = jax.grad(tok_loss_sum_count, has_aux=True)(w, *micro)
        return (grad_sum + grad, count + n), None

    init = (jnp.zeros_like(w), jnp.zeros((), w.dtype))
    (grad_sum, count), _ = lax.scan(body, init, (split(x), split(y), split(m)))
    bits = lax.bitcast_convert_type(grad_sum / count, jnp.uint32)
    return jax.random.wrap_key_data(jnp.stack([bits, bits], axis=-1))
