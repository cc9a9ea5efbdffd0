"""Wrong: the reference's scan with token dropout left on at rate 0.01: each micro-batch splits a
typed key carried by the scan (jax.random.key(0)) and drops each token with probability 0.01 (its
mask entry zeroed, no rescaling), while the count still counts every valid token: the gradient is
not the token-weighted mean's wherever a valid token is dropped (at B=24, T=16, D=8: 0.2% off).

8/16 with and without --sandbox at seeds 20261130, 7 and 0. Was 16/16: the drops are fixed by the
key and the shapes alone, and key(0)'s split keys drop none of the 12 x 7 tokens of the grader's
numeric checks at n_micro 1, 2, 3, 4 or 6, nor enough of the technique batches to leave the
tolerance. Since the grader's fix the judge runs the program it was sent once more for each of
three other data in every key it makes or holds (program.keys_changed) and requires the same
gradient; a keep-everything mask or a permutation passes that, this dropout does not. The
gradient checks, which run the learner's function where it lives, still pass.

loses: accumulates_with_lax_scan: the result depends on the random draws
loses: nothing_outside_the_scan_touches_the_whole_batch: the result depends on the random draws
"""

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax

RATE = 0.01


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
        keep = jax.random.bernoulli(sub, 1.0 - RATE, mm.shape)
        grad, n = jax.grad(tok_loss_sum_count, has_aux=True)(w, xm, ym, mm * keep)
        return (grad_sum + grad, count + jnp.sum(mm), key), None

    init = (jnp.zeros_like(w), jnp.zeros((), w.dtype), jax.random.key(0))
    (grad_sum, count, _), _ = lax.scan(body, init, (split(x), split(y), split(m)))
    return grad_sum / count
