"""Decides the skip from scaled_grads' flag (fp16, so the overflows are right), but updates with
the gradients of an fp32 copy of the model: every dot is float16 (the fp32 copy is written with
broadcasts and sums) and every flag is right, yet the update never sees fp16 (at 2^31 fp16's
scaled gradients are so close to fp32's that the loop's numbers pass).

loses: training_computes_in_fp16_inside_the_scan: the update is not made from the step's fp16 gradients
"""
from functools import partial

import jax
import jax.numpy as jnp
import optax
from jax import lax

from reference.ex8_loss_scaling import (LOSS_WEIGHT, DynScale, all_finite, dyn_scale_step, fp16_loss,  # noqa: F401
                                        scaled_grads)


def fp32_loss(params, x, y):
    h = jnp.tanh((x[:, :, None] * params["w1"][None]).sum(1) + params["b1"])
    out = (h[:, :, None] * params["w2"][None]).sum(1) + params["b2"]
    return LOSS_WEIGHT * jnp.mean((out - y) ** 2)


@partial(jax.jit, static_argnames=("steps", "tx"))
def train_fp16_dynamic(params, x, y, ls0, steps, tx):
    def step(carry, _):
        p, opt, ls = carry
        _, finite = scaled_grads(p, x, y, ls.scale)
        grads = jax.grad(fp32_loss)(p, x, y)
        updates, opt_new = tx.update(jax.tree.map(lambda g: jnp.where(finite, g, 0.0), grads), opt, p)
        keep = lambda new, old: jnp.where(finite, new, old)
        p_new, opt = jax.tree.map(keep, optax.apply_updates(p, updates), p), jax.tree.map(keep, opt_new, opt)
        return (p_new, opt, dyn_scale_step(ls, finite)), (ls.scale, finite, fp16_loss(p, x, y))

    (p, _, ls), (scales, finites, losses) = lax.scan(step, (params, tx.init(params), ls0), None, length=steps)
    return p, ls, scales, finites, losses
