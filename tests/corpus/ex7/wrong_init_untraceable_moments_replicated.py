"""WRONG: params placed right from blocks made by jnp.asarray(block, device=d) and assembled by
jax.make_array_from_single_device_arrays (an init no trace attempt reaches, like
tests/right/ex7/init_blocks_by_jnp_asarray_device.py), its moments made by tx.init from the
params put replicated (P()): every device stores every moment whole.

Since the grader's fix such an init is run eagerly and its whole output put back where it lies: the judge
places those values itself and reads the moments replicated. Scores (--seed 20261130):
without --sandbox 20/22. Should get 20/22.

loses: optimizer_state_carries_parameter_specs: replicated
"""
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding

from reference.ex7_megatron_tp import (  # right as they are
    PARAM_SPECS, make_tp_mlp_shard_map, make_tp_train_step, tp_mlp,
)


def init_tp_state(mesh, tx, params):
    placed = {}
    for k, v in params.items():
        sharding = NamedSharding(mesh, PARAM_SPECS[k])
        blocks = [jnp.asarray(v[idx], device=d) for d, idx in sharding.addressable_devices_indices_map(v.shape).items()]
        placed[k] = jax.make_array_from_single_device_arrays(v.shape, sharding, blocks)
    return placed, tx.init({k: jax.device_put(v, NamedSharding(mesh, jax.P())) for k, v in params.items()})
