"""Right: the reference, its optimizer chained with optax.add_noise at eta=0.0 (gradient noise switched
off: the reference's numbers); the noise's typed PRNG key rides in the optimizer state through the scan,
and a skipped step keeps it with lax.select like every other leaf.

Full marks (30/30 with and without --sandbox at seeds 20261130, 7 and 0): the key in the scan's
carry is no parameter and no moment; the first step alone reads it as its key data.
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
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(tree)]))


def scaled_grads(params, x, y, scale):
    # The scale multiplies the fp32 loss *before* differentiating, so every fp16 cotangent of
    # the backward pass is scale times larger; dividing afterwards happens in fp32.
    grads = jax.grad(lambda p: fp16_loss(p, x, y) * scale)(params)
    grads = jax.tree.map(lambda g: g / scale, grads)
    return grads, all_finite(grads)


def dyn_scale_step(ls, finite, period=50, factor=2.0, min_scale=1.0):
    good = ls.good_steps + 1
    grow = finite & (good >= period)
    scale = jnp.where(finite, jnp.where(grow, ls.scale * factor, ls.scale),
                      jnp.maximum(ls.scale / factor, min_scale))
    return DynScale(scale.astype(ls.scale.dtype), jnp.where(finite & ~grow, good, 0).astype(ls.good_steps.dtype))


@partial(jax.jit, static_argnames=("steps", "tx"))
def train_fp16_dynamic(params, x, y, ls0, steps, tx):
    # gradient noise (Neelakantan et al.), switched off for now: eta = 0.0 adds zero noise
    tx = optax.chain(tx, optax.add_noise(0.0, 0.55, key=jax.random.key(0)))

    def step(carry, _):
        p, opt, ls = carry
        grads, finite = scaled_grads(p, x, y, ls.scale)
        safe = jax.tree.map(lambda g: jnp.where(finite, g, 0.0), grads)  # keep NaN out of the update
        updates, opt_new = tx.update(safe, opt, p)
        p_new = optax.apply_updates(p, updates)
        keep = lambda new, old: lax.select(finite, new, old)  # a skipped step changes nothing (keys too)
        p, opt = jax.tree.map(keep, p_new, p), jax.tree.map(keep, opt_new, opt)
        loss = fp16_loss(carry[0], x, y)
        return (p, opt, dyn_scale_step(ls, finite)), (ls.scale, finite, loss)

    (p, _, ls), (scales, finites, losses) = lax.scan(step, (params, tx.init(params), ls0), None, length=steps)
    return p, ls, scales, finites, losses
