"""Exercise 8 without the technique: every number right, but no fp16 compute and no compiled loop.
scaled_grads multiplies in float32, rounding each product's operands and result to float16 (the
numbers of fp16's underflow and overflow, without an fp16 matrix product), and train_fp16_dynamic
is a Python loop over steps around a jitted step (tracing unrolls it: no lax.scan holds the
steps). Graded honestly it earns the rule, all_finite and the numbers of scaled_grads only."""
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

LOSS_WEIGHT = 5e-5


class DynScale(NamedTuple):
    scale: jax.Array
    good_steps: jax.Array


def _mm(a, b):
    """a @ b in float32 on float16 operands, rounded to float16: fp16's numbers, no fp16 dot."""
    f16, f32 = jnp.float16, jnp.float32
    return (a.astype(f16).astype(f32) @ b.astype(f16).astype(f32)).astype(f16)


def fp16_loss(params, x, y):
    f16 = jnp.float16
    h = jnp.tanh(_mm(x, params["w1"]) + params["b1"].astype(f16))
    out = _mm(h, params["w2"]) + params["b2"].astype(f16)
    return LOSS_WEIGHT * jnp.mean((out.astype(jnp.float32) - y) ** 2)


def all_finite(tree):
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(tree)]))


def scaled_grads(params, x, y, scale):
    grads = jax.grad(lambda p: fp16_loss(p, x, y) * scale)(params)
    grads = jax.tree.map(lambda g: g / scale, grads)
    return grads, all_finite(grads)


def dyn_scale_step(ls, finite, period=50, factor=2.0, min_scale=1.0):
    good = ls.good_steps + 1
    grow = finite & (good >= period)
    scale = jnp.where(finite, jnp.where(grow, ls.scale * factor, ls.scale),
                      jnp.maximum(ls.scale / factor, min_scale))
    return DynScale(scale.astype(ls.scale.dtype), jnp.where(finite & ~grow, good, 0).astype(ls.good_steps.dtype))


@partial(jax.jit, static_argnames="tx")
def _one_step(p, opt, ls, x, y, tx):
    grads, finite = scaled_grads(p, x, y, ls.scale)
    updates, opt_new = tx.update(jax.tree.map(lambda g: jnp.where(finite, g, 0.0), grads), opt, p)
    keep = lambda new, old: jnp.where(finite, new, old)
    p_new = jax.tree.map(keep, optax.apply_updates(p, updates), p)
    return p_new, jax.tree.map(keep, opt_new, opt), dyn_scale_step(ls, finite), finite, fp16_loss(p, x, y)


def train_fp16_dynamic(params, x, y, ls0, steps, tx):
    p, opt, ls, scales, finites, losses = params, tx.init(params), ls0, [], [], []
    for _ in range(steps):
        scales.append(ls.scale)
        p, opt, ls, finite, loss = _one_step(p, opt, ls, x, y, tx)
        finites.append(finite), losses.append(loss)
    return p, ls, jnp.stack(scales), jnp.stack(finites), jnp.stack(losses)
