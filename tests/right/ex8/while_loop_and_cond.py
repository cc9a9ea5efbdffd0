"""Right: the training loop a lax.while_loop over a step counter, the skip a lax.cond that
returns either the updated or the old parameters and optimizer state; all_finite through
jnp.isfinite of every leaf concatenated (float16 leaves cast to float32, which keeps inf and NaN);
the rule with lax.cond too (it runs under jit and in a scan like jnp.where).
"""

from functools import partial

import jax
import jax.numpy as jnp
import optax
from jax import lax

from reference.ex8_loss_scaling import DynScale, fp16_loss  # noqa: F401  given as they are


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
        i, p, opt, ls, record = carry
        grads, finite = scaled_grads(p, x, y, ls.scale)
        new_p, new_opt = lax.cond(finite, update, lambda p, opt, grads: (p, opt), p, opt, grads)
        record = (record[0].at[i].set(ls.scale), record[1].at[i].set(finite), record[2].at[i].set(fp16_loss(p, x, y)))
        return i + 1, new_p, new_opt, dyn_scale_step(ls, finite), record

    record = (jnp.zeros(steps, jnp.float32), jnp.zeros(steps, jnp.bool_), jnp.zeros(steps, jnp.float32))
    _, p, _, ls, (scales, finites, losses) = lax.while_loop(
        lambda carry: carry[0] < steps, body, (0, params, tx.init(params), ls0, record))
    return p, ls, scales, finites, losses
