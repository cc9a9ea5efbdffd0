"""The reference loop with lax.scan(..., unroll=True): one scan in the traced program, but one
copy of the step per step in what XLA compiles (165 s to compile at 64 steps, against 1.8 s).

loses: train_is_one_scan_in_one_jit: the loop is unrolled (its lax.scan unrolls every step
loses: training_matches_step_by_step_simulation: the loop was not run
technique: none (every number right, the technique not doing the work)
"""
from functools import partial

import jax
import jax.numpy as jnp
import optax
from jax import lax

from reference.ex8_loss_scaling import DynScale, all_finite, dyn_scale_step, fp16_loss, scaled_grads  # noqa: F401


@partial(jax.jit, static_argnames=("steps", "tx"))
def train_fp16_dynamic(params, x, y, ls0, steps, tx):
    def step(carry, _):
        p, opt, ls = carry
        grads, finite = scaled_grads(p, x, y, ls.scale)
        updates, opt_new = tx.update(jax.tree.map(lambda g: jnp.where(finite, g, 0.0), grads), opt, p)
        keep = lambda new, old: jnp.where(finite, new, old)
        p_new, opt = jax.tree.map(keep, optax.apply_updates(p, updates), p), jax.tree.map(keep, opt_new, opt)
        return (p_new, opt, dyn_scale_step(ls, finite)), (ls.scale, finite, fp16_loss(p, x, y))

    init = (params, tx.init(params), ls0)
    (p, _, ls), (scales, finites, losses) = lax.scan(step, init, None, length=steps, unroll=True)
    return p, ls, scales, finites, losses
