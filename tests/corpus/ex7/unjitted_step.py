"""Returns a plain Python step: every operation is dispatched on its own, never one program.

loses: training_step_is_jitted: not jitted
"""
import jax
import optax

from reference.ex7_megatron_tp import _loss, init_tp_state, make_tp_mlp_shard_map, tp_mlp  # right as they are


def make_tp_train_step(mesh, tx):
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
