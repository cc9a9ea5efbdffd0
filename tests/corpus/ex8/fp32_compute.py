"""No loss scaling where it matters: the gradients come from an fp32 copy of the model, which
never underflows (nor overflows at the scales used here).

loses: grads_at_scale_1_underflow_as_fp16_does: not computed in fp16
loses: scaled_grads_compute_in_fp16: the compute must be fp16
loses: training_computes_in_fp16_inside_the_scan: all in float16
technique: none (every number right, the technique not doing the work)
"""
from functools import partial

import jax
import jax.numpy as jnp
import optax
from jax import lax

from reference.ex8_loss_scaling import LOSS_WEIGHT, DynScale, all_finite, dyn_scale_step, fp16_loss  # noqa: F401


def fp32_loss(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return LOSS_WEIGHT * jnp.mean((h @ params["w2"] + params["b2"] - y) ** 2)


def scaled_grads(params, x, y, scale):
    grads = jax.grad(lambda p: fp32_loss(p, x, y) * scale)(params)
    grads = jax.tree.map(lambda g: g / scale, grads)
    return grads, all_finite(grads)


@partial(jax.jit, static_argnames=("steps", "tx"))
def train_fp16_dynamic(params, x, y, ls0, steps, tx):
    def step(carry, _):
        p, opt, ls = carry
        grads, finite = scaled_grads(p, x, y, ls.scale)
        updates, opt_new = tx.update(jax.tree.map(lambda g: jnp.where(finite, g, 0.0), grads), opt, p)
        keep = lambda new, old: jnp.where(finite, new, old)
        p_new, opt = jax.tree.map(keep, optax.apply_updates(p, updates), p), jax.tree.map(keep, opt_new, opt)
        return (p_new, opt, dyn_scale_step(ls, finite)), (ls.scale, finite, fp32_loss(p, x, y))

    (p, _, ls), (scales, finites, losses) = lax.scan(step, (params, tx.init(params), ls0), None, length=steps)
    return p, ls, scales, finites, losses
