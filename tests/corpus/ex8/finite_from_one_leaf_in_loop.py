"""The loop decides the skip from the last layer's gradient only ("it overflows first"): when
only w1's gradient is inf or NaN, the step is taken and NaN reaches the parameters.

loses: skip_is_decided_inside_the_scan_from_the_steps_finite_flag: an inf in x makes only grads['w1'] inf or NaN
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
        grads, _ = scaled_grads(p, x, y, ls.scale)
        finite = jnp.isfinite(grads["w2"]).all() & jnp.isfinite(grads["b2"]).all()
        updates, opt_new = tx.update(jax.tree.map(lambda g: jnp.where(finite, g, 0.0), grads), opt, p)
        keep = lambda new, old: jnp.where(finite, new, old)
        p_new, opt = jax.tree.map(keep, optax.apply_updates(p, updates), p), jax.tree.map(keep, opt_new, opt)
        return (p_new, opt, dyn_scale_step(ls, finite)), (ls.scale, finite, fp16_loss(p, x, y))

    (p, _, ls), (scales, finites, losses) = lax.scan(step, (params, tx.init(params), ls0), None, length=steps)
    return p, ls, scales, finites, losses
