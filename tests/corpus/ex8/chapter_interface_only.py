"""The chapter's section 6.7 cells as they are: its DynScale, all_finite and dyn_scale_step (the
package's interface), its own fp16 loss factory on a list of (w, b) pairs, and a training loop
that closes over its own Adam (3e-3) and takes no optimizer. scaled_grads is not there (the
chapter scales and unscales inside the step), and train_fp16_dynamic cannot be given a tx.

loses: grads_at_scale_1_underflow_as_fp16_does: defines no `scaled_grads`
loses: training_matches_step_by_step_simulation: cannot be called as train_fp16_dynamic(params, x, y, ls0, steps, tx)
"""
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax


def make_fp16_loss(scale, weight=1.0):
    """fp16 compute, fp32 master weights; returns weight × loss × scale."""
    def loss(p, x, y):
        h = x.astype(jnp.float16)
        for i, (w, b) in enumerate(p):
            h = h @ w.astype(jnp.float16) + b.astype(jnp.float16)
            if i < len(p) - 1:
                h = jnp.tanh(h)
        err = h.astype(jnp.float32) - y
        return weight * jnp.mean(err ** 2) * scale
    return loss


class DynScale(NamedTuple):
    scale: jax.Array
    good_steps: jax.Array


def all_finite(tree):
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(t)) for t in jax.tree.leaves(tree)]))


def dyn_scale_step(ls: DynScale, finite, period=50, factor=2.0, min_scale=1.0):
    grow = finite & (ls.good_steps + 1 >= period)
    new_scale = jnp.where(finite, jnp.where(grow, ls.scale * factor, ls.scale),
                          jnp.maximum(ls.scale / factor, min_scale))
    new_good = jnp.where(finite & ~grow, ls.good_steps + 1, 0)
    return DynScale(new_scale, new_good)


fp16_tx = optax.adam(3e-3)


@partial(jax.jit, static_argnames="steps")
def train_fp16_dynamic(p, x, y, ls0, steps):
    def step(carry, _):
        p, s, ls = carry
        scaled_loss = lambda p_: make_fp16_loss(1.0)(p_, x, y) * ls.scale
        loss_scaled, g = jax.value_and_grad(scaled_loss)(p)
        g = jax.tree.map(lambda t: t / ls.scale, g)
        finite = all_finite(g)
        u, s_new = fp16_tx.update(jax.tree.map(lambda t: jnp.where(finite, t, 0.0), g), s, p)
        p_new = optax.apply_updates(p, u)
        p = jax.tree.map(lambda a, b: jnp.where(finite, a, b), p_new, p)
        s = jax.tree.map(lambda a, b: jnp.where(finite, a, b), s_new, s)
        return (p, s, dyn_scale_step(ls, finite)), (ls.scale, finite, loss_scaled / ls.scale)
    (p, s, ls), (scales, finites, losses) = lax.scan(step, (p, fp16_tx.init(p), ls0), None, length=steps)
    return p, ls, scales, finites, losses
