"""States out_sharding=P(): the output is replicated, so every device gathers every batch row.

loses: outputs_sharded_by_data: It is replicated
loses: tp_mlp_forward_communicates_once: the batch rows are gathered across 'data'
loses: tp_mlp_states_the_output_sharding: states out_sharding P()
"""
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from reference.ex7_megatron_tp import (  # right as they are
    init_tp_state, make_tp_mlp_shard_map, make_tp_train_step,
)


def tp_mlp(w1, w2, x):
    return jnp.matmul(jax.nn.relu(x @ w1), w2, out_sharding=P())
