"""Right: the training loop a lax.while_loop over a step counter (as in while_loop_and_cond),
its carry also holding a legacy uint32 PRNGKey split each step to draw a row mask of keep
probability 1.0 for the batch (example dropout switched off: the reference's numbers); the skip a
lax.cond, the key carried through the loop like any other value.

Full marks (30/30 with and without --sandbox at seeds 20261130, 7 and 0): the first step run alone
reads the carried key as its key data, neither a parameter nor a moment.
"""

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax

LOSS_WEIGHT = 5e-5


class DynScale(NamedTuple):
    scale: jax.Array
    good_steps: jax.Array


def fp16_loss(params, x, y):
    f16 = jnp.float16
    h = jnp.tanh(x.astype(f16) @ params["w1"].astype(f16) + params["b1"].astype(f16))
    out = h @ params["w2"].astype(f16) + params["b2"].astype(f16)
    return LOSS_WEIGHT * jnp.mean((out.astype(jnp.float32) - y) ** 2)


def all_finite(tree):
    flat = jnp.concatenate([jnp.ravel(leaf).astype(jnp.float32) for leaf in jax.tree.leaves(tree)])
    return jnp.isfinite(flat).all()


def scaled_grads(params, x, y, scale):
    loss_times_scale = lambda p: scale * fp16_loss(p, x, y)
    grads = jax.tree.map(lambda g: jnp.divide(g, scale), jax.grad(loss_times_scale)(params))
    return grads, all_finite(grads)


def dyn_scale_step(ls, finite, period=50, factor=2.0, min_scale=1.0):
    def ok(ls):
        grow = ls.good_steps + 1 >= period
        return DynScale(jnp.where(grow, ls.scale * factor, ls.scale).astype(jnp.float32),
                        jnp.where(grow, 0, ls.good_steps + 1).astype(jnp.int32))

    def overflow(ls):
        return DynScale(jnp.maximum(ls.scale / factor, min_scale).astype(jnp.float32), jnp.int32(0))

    return lax.cond(finite, ok, overflow, ls)


@partial(jax.jit, static_argnames=("steps", "tx"))
def train_fp16_dynamic(params, x, y, ls0, steps, tx):
    def update(p, opt, grads):
        updates, opt = tx.update(grads, opt, p)
        return optax.apply_updates(p, updates), opt

    def body(carry):
        i, p, opt, ls, record, key = carry
        key, sub = jax.random.split(key)
        keep = jax.random.bernoulli(sub, 1.0, (x.shape[0], 1)).astype(x.dtype)  # keep every example for now
        grads, finite = scaled_grads(p, x * keep, y, ls.scale)
        new_p, new_opt = lax.cond(finite, update, lambda p, opt, grads: (p, opt), p, opt, grads)
        record = (record[0].at[i].set(ls.scale), record[1].at[i].set(finite), record[2].at[i].set(fp16_loss(p, x, y)))
        return i + 1, new_p, new_opt, dyn_scale_step(ls, finite), record, key

    record = (jnp.zeros(steps, jnp.float32), jnp.zeros(steps, jnp.bool_), jnp.zeros(steps, jnp.float32))
    _, p, _, ls, (scales, finites, losses), _ = lax.while_loop(
        lambda carry: carry[0] < steps, body, (0, params, tx.init(params), ls0, record, jax.random.PRNGKey(0)))
    return p, ls, scales, finites, losses
