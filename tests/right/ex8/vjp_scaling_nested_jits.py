"""Right: the scale enters as the cotangent of a jax.vjp of the fp16 loss (the same as
differentiating loss * scale) and leaves as a product with 1 / scale; scaled_grads is a jitted
function (a decorator) called from a jitted loop that calls another jitted function holding the
scan, with steps and tx static by position; all_finite as "the largest |entry| is below inf"
(NaN propagates through max, and NaN < inf is False).
"""

from functools import partial

import jax
import jax.numpy as jnp
import optax
from jax import lax

from reference.ex8_loss_scaling import DynScale, fp16_loss  # noqa: F401  given as they are


def all_finite(tree):
    leaves = [jnp.max(jnp.abs(leaf)).astype(jnp.float32) < jnp.inf for leaf in jax.tree.leaves(tree)]
    return jnp.stack(leaves).all()


@jax.jit
def scaled_grads(params, x, y, scale):
    _, vjp = jax.vjp(lambda p: fp16_loss(p, x, y), params)
    (scaled,) = vjp(jnp.asarray(scale, jnp.float32))
    grads = jax.tree.map(lambda g: g * (1.0 / scale), scaled)
    return grads, all_finite(grads)


def dyn_scale_step(ls, finite, period=50, factor=2.0, min_scale=1.0):
    good = ls.good_steps + 1
    grow = finite & (good >= period)
    scale = jnp.where(grow, ls.scale * factor, ls.scale)
    scale = jnp.where(finite, scale, jnp.maximum(ls.scale / factor, min_scale))
    return DynScale(scale.astype(jnp.float32), jnp.where(finite & ~grow, good, 0).astype(jnp.int32))


def _loop(params, x, y, ls0, steps, tx):
    def step(carry, _):
        p, opt, ls = carry
        grads, finite = scaled_grads(p, x, y, ls.scale)
        zero_if_bad = jax.tree.map(lambda g: jnp.where(finite, g, 0.0), grads)
        updates, opt2 = tx.update(zero_if_bad, opt, p)
        p2 = optax.apply_updates(p, updates)
        p, opt = jax.tree.map(lambda a, b: jnp.where(finite, a, b), (p2, opt2), (p, opt))
        return (p, opt, dyn_scale_step(ls, finite)), (ls.scale, finite, fp16_loss(carry[0], x, y))

    return lax.scan(step, (params, tx.init(params), ls0), None, length=steps)


_jitted_loop = jax.jit(_loop, static_argnums=(4, 5))


@jax.jit
def _unpack(result):
    (p, _, ls), (scales, finites, losses) = result
    return p, ls, scales, finites, losses


@partial(jax.jit, static_argnums=(4, 5))
def train_fp16_dynamic(params, x, y, ls0, steps, tx):
    return _unpack(_jitted_loop(params, x, y, ls0, steps, tx))
