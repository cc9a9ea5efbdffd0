"""Gathers the optimizer's moments whole to update them, then keeps only each device's block:
the state it returns is split right, but every step moves every moment.

loses: training_step_communicates_like_megatron: optimizer
"""
import jax
import optax
from jax.sharding import PartitionSpec as P, reshard

from reference.ex7_megatron_tp import _loss, init_tp_state, make_tp_mlp_shard_map, tp_mlp  # right as they are


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        specs = jax.tree.map(lambda a: jax.typeof(a).sharding.spec, opt_state)
        whole = jax.tree.map(lambda a: reshard(a, P()), opt_state)
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, whole = tx.update(jax.tree.map(lambda g: reshard(g, P()), grads), whole,
                                   jax.tree.map(lambda p: reshard(p, P()), params))
        opt_state = jax.tree.map(lambda a, s: reshard(a, s), whole, specs)
        updates = jax.tree.map(lambda u, p: reshard(u, jax.typeof(p).sharding.spec), updates, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
