"""Right: the micro-batch loss sum is a jax.custom_vjp function with its gradient written by hand
(d/dw of sum m (tanh(x w) - y)^2), the scan over micro-batches given as xs, and the token count
added in the body from the mask.
"""

import jax
import jax.numpy as jnp
from jax import lax


def tok_loss_sum_count(w, x, y, m):
    return jnp.sum(m * jnp.square(jnp.tanh(jnp.einsum("btd,d->bt", x, w)) - y)), m.sum()


@jax.custom_vjp
def loss_sum(w, x, y, m):
    return tok_loss_sum_count(w, x, y, m)[0]


def loss_sum_fwd(w, x, y, m):
    t = jnp.tanh(jnp.einsum("btd,d->bt", x, w))
    return jnp.sum(m * (t - y) ** 2), (t, x, y, m)


def loss_sum_bwd(res, g):
    t, x, y, m = res
    dw = jnp.einsum("bt,btd->d", m * 2.0 * (t - y) * (1.0 - t * t), x)
    return g * dw, None, None, None


loss_sum.defvjp(loss_sum_fwd, loss_sum_bwd)


def accum_token_weighted(w, x, y, m, n_micro):
    def step(carry, micro):
        x_, y_, m_ = micro
        return (carry[0] + jax.grad(loss_sum)(w, x_, y_, m_), carry[1] + jnp.sum(m_)), None

    split = lambda a: jnp.stack(jnp.split(a, n_micro))  # noqa: E731
    (g_sum, count), _ = lax.scan(step, (jnp.zeros_like(w), jnp.zeros((), jnp.float32)),
                                 (split(x), split(y), split(m)))
    return g_sum / count
