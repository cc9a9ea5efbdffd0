"""Decoy: the gradients come from an fp32 model written without dot_general (broadcast and sum),
and the fp16 model's gradients are added in times zero, so every dot in the program is float16.

loses: scaled_grads_compute_in_fp16: the float16 matrix products are there, but the gradients do not show fp16's underflow
loses: training_computes_in_fp16_inside_the_scan: was finite, where fp16 overflows
technique: none (every number right, the technique not doing the work)
"""
from functools import partial

import jax
import jax.numpy as jnp
import optax
from jax import lax

from reference.ex8_loss_scaling import LOSS_WEIGHT, DynScale, all_finite, dyn_scale_step, fp16_loss  # noqa: F401


def fp32_loss(params, x, y):
    h = jnp.tanh((x[:, :, None] * params["w1"][None]).sum(1) + params["b1"])
    out = (h[:, :, None] * params["w2"][None]).sum(1) + params["b2"]
    return LOSS_WEIGHT * jnp.mean((out - y) ** 2)


def scaled_grads(params, x, y, scale):
    real = jax.grad(lambda p: fp32_loss(p, x, y) * scale)(params)
    shown = jax.grad(lambda p: fp16_loss(p, x, y) * scale)(params)
    grads = jax.tree.map(lambda g, d: g / scale + 0.0 * jnp.nan_to_num(d), real, shown)
    return grads, all_finite(grads)


@partial(jax.jit, static_argnames=("steps", "tx"))
def train_fp16_dynamic(params, x, y, ls0, steps, tx):
    def step(carry, _):
        p, opt, ls = carry
        grads, finite = scaled_grads(p, x, y, ls.scale)
        updates, opt_new = tx.update(jax.tree.map(lambda g: jnp.where(finite, g, 0.0), grads), opt, p)
        keep = lambda new, old: jnp.where(finite, new, old)
        p_new, opt = jax.tree.map(keep, optax.apply_updates(p, updates), p), jax.tree.map(keep, opt_new, opt)
        return (p_new, opt, dyn_scale_step(ls, finite)), (ls.scale, finite, fp16_loss(p, x, y))

    (p, _, ls), (scales, finites, losses) = lax.scan(step, (params, tx.init(params), ls0), None, length=steps)
    return p, ls, scales, finites, losses
