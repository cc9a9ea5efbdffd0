"""Gathers the gradients whole (grads resharded to P()) and then updates replicated weights,
resharding the new weights back to their specs.

loses: training_step_communicates_like_megatron: gradients
"""
import jax
import optax
from jax.sharding import PartitionSpec as P, reshard

from reference.ex7_megatron_tp import _loss, init_tp_state, make_tp_mlp_shard_map, tp_mlp  # right as they are


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        grads = jax.tree.map(lambda g, p: reshard(reshard(g, P()), jax.typeof(p).sharding.spec), grads, params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
