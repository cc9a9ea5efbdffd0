"""Splits w2 by columns like w1, so each device must first gather every hidden unit of h.

loses: tp_mlp_forward_communicates_once: w2 is split by columns
loses: tp_mlp_states_the_output_sharding: no matmul in tp_mlp contracts the hidden units
"""
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P, reshard

from reference.ex7_megatron_tp import (  # right as they are
    init_tp_state, make_tp_mlp_shard_map, make_tp_train_step,
)


def tp_mlp(w1, w2, x):
    h = jax.nn.relu(x @ w1)
    return jnp.matmul(reshard(h, P("data", None)), reshard(w2, P(None, "model")), out_sharding=P("data", None))
