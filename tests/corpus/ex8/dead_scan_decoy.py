"""Decoy: the Python loop of python_loop.py plus a do-nothing lax.scan of length steps.

loses: train_is_one_scan_in_one_jit: the loop is unrolled in Python
loses: training_computes_in_fp16_inside_the_scan: no single lax.scan of length steps
loses: skip_is_decided_inside_the_scan_from_the_steps_finite_flag: no single lax.scan of length steps
"""
from functools import partial

import jax
import jax.numpy as jnp
import optax
from jax import lax

from reference.ex8_loss_scaling import DynScale, all_finite, dyn_scale_step, fp16_loss, scaled_grads  # noqa: F401


@partial(jax.jit, static_argnames="tx")
def one_step(p, opt, ls, x, y, tx):
    grads, finite = scaled_grads(p, x, y, ls.scale)
    updates, opt_new = tx.update(jax.tree.map(lambda g: jnp.where(finite, g, 0.0), grads), opt, p)
    keep = lambda new, old: jnp.where(finite, new, old)
    p_new = jax.tree.map(keep, optax.apply_updates(p, updates), p)
    return p_new, jax.tree.map(keep, opt_new, opt), dyn_scale_step(ls, finite), finite, fp16_loss(p, x, y)


def train_fp16_dynamic(params, x, y, ls0, steps, tx):
    count, _ = lax.scan(lambda c, _: (c + 1.0, None), 0.0, None, length=steps)
    p, opt, ls, scales, finites, losses = params, tx.init(params), ls0, [], [], []
    for _ in range(steps):
        scales.append(ls.scale * (count / steps))
        p, opt, ls, finite, loss = one_step(p, opt, ls, x, y, tx)
        finites.append(finite), losses.append(loss)
    return p, ls, jnp.stack(scales), jnp.stack(finites), jnp.stack(losses)
