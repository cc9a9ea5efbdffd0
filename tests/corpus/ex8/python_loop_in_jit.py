"""A Python loop over the steps inside one jax.jit: every choice a jnp.where and the numbers
right, but the loop is unrolled into the program, one copy of the step per step (it once took
3-4 minutes to grade and ended in an AssertionError at the learner's call line).

loses: train_is_one_scan_in_one_jit: the loop is unrolled in Python
loses: training_recovers_from_a_too_large_scale: the loop was not run
technique: none (every number right, the technique not doing the work)
"""
from functools import partial

import jax
import jax.numpy as jnp
import optax

from reference.ex8_loss_scaling import DynScale, all_finite, dyn_scale_step, fp16_loss, scaled_grads  # noqa: F401


@partial(jax.jit, static_argnames=("steps", "tx"))
def train_fp16_dynamic(params, x, y, ls0, steps, tx):
    p, opt, ls, scales, finites, losses = params, tx.init(params), ls0, [], [], []
    for _ in range(steps):
        grads, finite = scaled_grads(p, x, y, ls.scale)
        scales.append(ls.scale), finites.append(finite), losses.append(fp16_loss(p, x, y))
        updates, opt_new = tx.update(jax.tree.map(lambda g: jnp.where(finite, g, 0.0), grads), opt, p)
        keep = lambda new, old: jnp.where(finite, new, old)
        p, opt = jax.tree.map(keep, optax.apply_updates(p, updates), p), jax.tree.map(keep, opt_new, opt)
        ls = dyn_scale_step(ls, finite)
    return p, ls, jnp.stack(scales), jnp.stack(finites), jnp.stack(losses)
