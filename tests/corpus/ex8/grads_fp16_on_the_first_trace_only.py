"""WRONG: scaled_grads computes in fp16 on its first trace only (the one a grader reading the program
may see first), and in fp32 on every later trace, which is what the learner's jitted calls compile:
a function whose program changes between traces.

Without --sandbox the judge runs the program it read through the learner's own jitted function only
where that function's trace is the program read, equation for equation (probes._traced_as_read);
here it is not, so the program read is compiled and run, and its gradients differ from the calls'.
17/30 in both modes at seed 20261130, the same message in both.

loses: scaled_grads_compute_in_fp16: returns other gradients
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


_TRACES = [0]


def scaled_grads(params, x, y, scale):
    # fp16 on its first trace only (what a grader reading the program sees first), fp32 after.
    _TRACES[0] += 1
    if _TRACES[0] == 1:
        grads = jax.grad(lambda p: fp16_loss(p, x, y) * scale)(params)
        grads = jax.tree.map(lambda g: g / scale, grads)
    else:
        grads = jax.grad(lambda p: jnp.mean((p["w1"].sum() * 0 + fp16_loss(p, x, y).astype(jnp.float32))))(params)
        grads = jax.tree.map(lambda g: g.astype(jnp.float32), grads)
    return grads, all_finite(grads)


def dyn_scale_step(ls, finite, period=50, factor=2.0, min_scale=1.0):
    good = ls.good_steps + 1
    grow = finite & (good >= period)
    scale = jnp.where(finite, jnp.where(grow, ls.scale * factor, ls.scale),
                      jnp.maximum(ls.scale / factor, min_scale))
    return DynScale(scale.astype(ls.scale.dtype), jnp.where(finite & ~grow, good, 0).astype(ls.good_steps.dtype))


@partial(jax.jit, static_argnames=("steps", "tx"))
def train_fp16_dynamic(params, x, y, ls0, steps, tx):
    def step(carry, _):
        p, opt, ls = carry
        grads, finite = scaled_grads(p, x, y, ls.scale)
        safe = jax.tree.map(lambda g: jnp.where(finite, g, 0.0), grads)  # keep NaN out of the update
        updates, opt_new = tx.update(safe, opt, p)
        p_new = optax.apply_updates(p, updates)
        keep = lambda new, old: jnp.where(finite, new, old)  # a skipped step changes nothing
        p, opt = jax.tree.map(keep, p_new, p), jax.tree.map(keep, opt_new, opt)
        loss = fp16_loss(carry[0], x, y)
        return (p, opt, dyn_scale_step(ls, finite)), (ls.scale, finite, loss)

    (p, _, ls), (scales, finites, losses) = lax.scan(step, (params, tx.init(params), ls0), None, length=steps)
    return p, ls, scales, finites, losses
