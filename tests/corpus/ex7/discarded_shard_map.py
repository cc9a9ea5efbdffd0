"""Calls a real shard_map and throws its result away; the answer comes from jit's own sharding.

loses: shard_map_psums_partial_sums_once_over_model: there is no shard_map
loses: shard_map_forward_communicates_once: the activations relu(x @ w1) are gathered
"""
import jax
from jax.sharding import PartitionSpec as P, reshard

from reference.ex7_megatron_tp import init_tp_state, make_tp_train_step, tp_mlp  # right as they are
from reference.ex7_megatron_tp import make_tp_mlp_shard_map as _real_shard_map


def make_tp_mlp_shard_map(mesh):
    decoy = _real_shard_map(mesh)

    def f(w1, w2, x):
        decoy(w1, w2, x)
        return reshard(jax.nn.relu(x @ w1), P("data", None)) @ w2

    return f
