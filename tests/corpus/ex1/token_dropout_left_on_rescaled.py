"""Wrong: the reference's scan with token dropout left on at rate 0.001 (each valid token dropped
with probability 0.001, the kept ones scaled by 1/0.999), a typed key carried by the scan: the
gradient is not the token-weighted mean's (about 0.1% off, more when a token is dropped).

3/16 at seed 20261130: the rescale puts every gradient about 0.1% off, which the gradient checks see.

loses: runs_under_jit: largest difference
loses: accumulates_with_lax_scan: the technique is judged on the program that computes your gradient
"""

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax

RATE = 0.001


def tok_loss_sum_count(w, x, y, m):
    per_token = (jnp.tanh(x @ w) - y) ** 2
    return jnp.sum(per_token * m), jnp.sum(m)


@partial(jax.jit, static_argnames="n_micro")
def accum_token_weighted(w, x, y, m, n_micro):
    def split(a):
        return a.reshape(n_micro, a.shape[0] // n_micro, *a.shape[1:])

    def body(carry, micro):
        grad_sum, count, key = carry
        key, sub = jax.random.split(key)
        xm, ym, mm = micro
        keep = jax.random.bernoulli(sub, 1.0 - RATE, mm.shape) / (1.0 - RATE)
        grad, n = jax.grad(tok_loss_sum_count, has_aux=True)(w, xm, ym, mm * keep)
        return (grad_sum + grad, count + jnp.sum(mm), key), None

    init = (jnp.zeros_like(w), jnp.zeros((), w.dtype), jax.random.key(0))
    (grad_sum, count, _), _ = lax.scan(body, init, (split(x), split(y), split(m)))
    return grad_sum / count
