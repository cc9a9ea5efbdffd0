"""Sums before the activation: relu(psum(x_blk @ w1_blk @ w2_blk)), relu of the summed partial products.

loses: shard_map_mlp_matches_numpy: the activation was applied after adding the partial sums
"""
import jax
from jax import lax

from reference.ex7_megatron_tp import (  # right as they are
    W1_SPEC, W2_SPEC, X_SPEC, init_tp_state, make_tp_train_step, tp_mlp,
)


def _local(w1_blk, w2_blk, x_blk):
    return jax.nn.relu(lax.psum(x_blk @ w1_blk @ w2_blk, "model"))


def make_tp_mlp_shard_map(mesh):
    return jax.shard_map(_local, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC)
