"""One psum over "model", but of the weight blocks placed in zero arrays: it assembles the whole
weights on every device (a gather in disguise), and each device then computes its rows alone.

loses: shard_map_psums_partial_sums_once_over_model: your psum adds an array of shape
loses: each_device_does_its_share_of_the_work: devices repeat each other's work
"""
import jax
import jax.numpy as jnp
from jax import lax

from reference.ex7_megatron_tp import (  # right as they are
    W1_SPEC, W2_SPEC, X_SPEC, init_tp_state, make_tp_train_step, tp_mlp,
)


def _local(w1_blk, w2_blk, x_blk):
    d, k = w1_blk.shape
    i = lax.axis_index("model")
    n = lax.axis_size("model")
    w1 = lax.dynamic_update_slice(jnp.zeros((d, k * n), w1_blk.dtype), w1_blk, (0, i * k))
    w2 = lax.dynamic_update_slice(jnp.zeros((k * n, d), w2_blk.dtype), w2_blk, (i * k, 0))
    packed = lax.psum(jnp.concatenate([w1, w2.T], axis=0), "model")
    return jax.nn.relu(x_blk @ packed[:d]) @ packed[d:].T


def make_tp_mlp_shard_map(mesh):
    return jax.shard_map(_local, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC)
