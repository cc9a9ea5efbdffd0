"""In the global view, applies relu after the second matmul: relu of the summed partial products.

loses: tp_mlp_matches_numpy: the activation was applied after adding the partial sums
"""
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from reference.ex7_megatron_tp import (  # right as they are
    init_tp_state, make_tp_mlp_shard_map, make_tp_train_step,
)


def tp_mlp(w1, w2, x):
    return jax.nn.relu(jnp.matmul(x @ w1, w2, out_sharding=P("data", None)))
