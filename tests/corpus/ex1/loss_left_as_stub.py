"""accum_token_weighted is written, but tok_loss_sum_count is still the stub: every check is not
attempted, and the gradient checks name the function that still raises, not the one they call.

loses: loss_sum_counts_only_valid_tokens: not attempted yet: `tok_loss_sum_count` still raises NotImplementedError
loses: gradient_matches_full_batch: `accum_token_weighted` calls `tok_loss_sum_count`, which still raises NotImplementedError
"""
from functools import partial

import jax
import jax.numpy as jnp
from jax import lax


def tok_loss_sum_count(w, x, y, m):
    raise NotImplementedError


@partial(jax.jit, static_argnames="n_micro")
def accum_token_weighted(w, x, y, m, n_micro):
    def split(a):
        return a.reshape(n_micro, a.shape[0] // n_micro, *a.shape[1:])

    def body(carry, micro):
        grad, n = jax.grad(tok_loss_sum_count, has_aux=True)(w, *micro)
        return (carry[0] + grad, carry[1] + n), None

    (grad_sum, count), _ = lax.scan(body, (jnp.zeros_like(w), jnp.zeros(())), (split(x), split(y), split(m)))
    return grad_sum / count
