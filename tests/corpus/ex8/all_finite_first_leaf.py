"""Looks at the first leaf only.

loses: all_finite_checks_every_leaf: are not looked at
"""
import jax
import jax.numpy as jnp

from reference.ex8_loss_scaling import (DynScale, dyn_scale_step, fp16_loss, scaled_grads,  # noqa: F401
                                        train_fp16_dynamic)


def all_finite(tree):
    return jnp.all(jnp.isfinite(jax.tree.leaves(tree)[0]))
