"""Right: the scan body is a jitted function wrapped in jax.checkpoint, and the micro-batch is
picked inside it with a traced index into the reshaped batch (nested transforms around the slice).
"""

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax

from reference.ex1_token_accumulation import tok_loss_sum_count  # noqa: F401  right as it is


@partial(jax.jit, static_argnames="n_micro")
def accum_token_weighted(w, x, y, m, n_micro):
    batch = tuple(a.reshape(n_micro, -1, *a.shape[1:]) for a in (x, y, m))

    @jax.checkpoint
    @jax.jit
    def micro_grad(w, batch, i):
        micro = jax.tree.map(lambda a: a[i], batch)
        return jax.grad(tok_loss_sum_count, has_aux=True)(w, *micro)

    def step(carry, i):
        g, n = micro_grad(w, batch, i)
        return jax.tree.map(jnp.add, carry, (g, n)), None

    (g_sum, count), _ = lax.scan(step, (jnp.zeros_like(w), jnp.zeros(())), jnp.arange(n_micro))
    return g_sum / count
