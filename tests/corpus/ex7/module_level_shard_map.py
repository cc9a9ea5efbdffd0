"""The chapter's spelling: one module-level jax.shard_map without mesh=, which the factory returns
whatever mesh it is given. It binds to the first mesh it is called under and fails on the others.

loses: shard_map_mlp_matches_numpy: a shard_map made once for the first mesh it met
"""
import jax

from reference.ex7_megatron_tp import (  # right as they are
    W1_SPEC, W2_SPEC, X_SPEC, _tp_mlp_local, init_tp_state, make_tp_train_step, tp_mlp,
)

_SHARD_MAP = jax.shard_map(_tp_mlp_local, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC)


def make_tp_mlp_shard_map(mesh):
    return _SHARD_MAP
