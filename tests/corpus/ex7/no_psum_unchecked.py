"""No psum, and check_vma=False to silence shard_map: the result is one device's partial sum.

loses: shard_map_mlp_matches_numpy: one device's partial sum
loses: shard_map_psums_partial_sums_once_over_model: found none
"""
import jax

from reference.ex7_megatron_tp import (  # right as they are
    W1_SPEC, W2_SPEC, X_SPEC, init_tp_state, make_tp_train_step, tp_mlp,
)


def _local(w1_blk, w2_blk, x_blk):
    return jax.nn.relu(x_blk @ w1_blk) @ w2_blk


def make_tp_mlp_shard_map(mesh):
    return jax.shard_map(_local, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC, check_vma=False)
