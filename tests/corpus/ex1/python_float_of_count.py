"""Right when called eagerly, but turns the traced token count into a Python float, so it cannot
run under jax.jit (or be traced at all).

loses: runs_under_jit: your code raised ConcretizationTypeError
"""
import jax
import jax.numpy as jnp
from jax import lax

from reference.ex1_token_accumulation import tok_loss_sum_count  # right as they are


def accum_token_weighted(w, x, y, m, n_micro):
    split = lambda a: a.reshape(n_micro, a.shape[0] // n_micro, *a.shape[1:])  # noqa: E731

    def body(carry, micro):
        g_sum, n_sum = carry
        g, n = jax.grad(tok_loss_sum_count, has_aux=True)(w, *micro)
        return (g_sum + g, n_sum + n), None

    (g, n), _ = lax.scan(body, (jnp.zeros_like(w), 0.0), (split(x), split(y), split(m)))
    return g / float(n)
