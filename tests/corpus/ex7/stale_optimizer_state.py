"""Returns the optimizer state it was given: momentum and Adam's moments never build up.

loses: sgd_training_matches_single_device: the optimizer state is not carried
loses: adam_training_matches_single_device: the optimizer state is not carried
"""
import jax
import optax

from reference.ex7_megatron_tp import _loss, init_tp_state, make_tp_mlp_shard_map, tp_mlp  # right as they are


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, _ = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
