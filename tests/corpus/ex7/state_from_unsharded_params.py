"""Places the parameters but builds the optimizer state from the host arrays: replicated moments.

loses: optimizer_state_carries_parameter_specs: made by tx.init from the unsharded parameters
"""
import jax
from jax.sharding import NamedSharding

from reference.ex7_megatron_tp import (  # right as they are
    PARAM_SPECS, make_tp_mlp_shard_map, make_tp_train_step, tp_mlp,
)


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    return placed, tx.init(params)
