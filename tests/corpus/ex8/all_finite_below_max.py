"""Tests |x| < the dtype's largest value: inf and NaN fail it, but so does the largest finite
value itself (65504 in float16, 3.4e38 in float32).

loses: all_finite_checks_every_leaf: is compared with `<`
"""
import jax
import jax.numpy as jnp

from reference.ex8_loss_scaling import (DynScale, dyn_scale_step, fp16_loss, scaled_grads,  # noqa: F401
                                        train_fp16_dynamic)


def all_finite(tree):
    return jnp.all(jnp.stack([jnp.all(jnp.abs(leaf) < jnp.finfo(leaf.dtype).max) for leaf in jax.tree.leaves(tree)]))
