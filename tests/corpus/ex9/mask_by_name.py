"""Decides by the leaf's name, as a mask written for one model does ("kernel" is decayed): right on
the model's params, wrong on a tree whose matrices have other names.

loses: decay_mask_marks_weight_matrices: decide by the leaf's shape
"""
import jax

from reference.ex9_zero1_adamw import (  # noqa: F401  right as they are
    adamw_step, init_params, init_zero1_state, loss, make_mesh, make_zero1_step, mlp,
)


def decay_mask(params):
    return jax.tree_util.tree_map_with_path(lambda path, p: "kernel" in jax.tree_util.keystr(path), params)
