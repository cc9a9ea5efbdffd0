"""Decides the scale with Python `if`s: right on concrete values, but a traced `finite` inside
jit or scan cannot be turned into a Python bool.

loses: scale_step_runs_under_jit_and_inside_scan: converts a traced value to a Python bool
technique: none (every number right, the technique not doing the work)
"""
import jax.numpy as jnp

from reference.ex8_loss_scaling import DynScale, all_finite, fp16_loss, scaled_grads  # noqa: F401


def dyn_scale_step(ls, finite, period=50, factor=2.0, min_scale=1.0):
    if finite:
        if ls.good_steps + 1 >= period:
            return DynScale(ls.scale * factor, jnp.int32(0))
        return DynScale(ls.scale, ls.good_steps + 1)
    return DynScale(jnp.maximum(ls.scale / factor, jnp.float32(min_scale)), jnp.int32(0))


def train_fp16_dynamic(params, x, y, ls0, steps, tx):
    """A Python loop, so the `if`s above see concrete values (the numbers come out right)."""
    import optax

    p, opt, ls, scales, finites, losses = params, tx.init(params), ls0, [], [], []
    for _ in range(steps):
        grads, finite = scaled_grads(p, x, y, ls.scale)
        scales.append(ls.scale), finites.append(finite), losses.append(fp16_loss(p, x, y))
        if finite:
            updates, opt = tx.update(grads, opt, p)
            p = optax.apply_updates(p, updates)
        ls = dyn_scale_step(ls, finite)
    return p, ls, jnp.stack(scales), jnp.stack(finites), jnp.stack(losses)
