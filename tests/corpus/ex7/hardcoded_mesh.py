"""Builds its own (2, 4) mesh instead of using the one it is given.

loses: shard_map_mlp_matches_numpy: hard-coded axis sizes
"""
import jax

from reference.ex7_megatron_tp import (  # right as they are
    W1_SPEC, W2_SPEC, X_SPEC, _tp_mlp_local, init_tp_state, make_tp_train_step, tp_mlp,
)


def make_tp_mlp_shard_map(mesh):
    mesh = jax.make_mesh((2, 4), ("data", "model"))
    return jax.shard_map(_tp_mlp_local, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC)
