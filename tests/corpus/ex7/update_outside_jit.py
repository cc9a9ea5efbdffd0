"""Jits the gradient but runs the optimizer update outside jit, operation by operation.

loses: training_step_is_jitted: part of your step runs outside jax.jit
"""
import jax
import optax

from reference.ex7_megatron_tp import _loss, init_tp_state, make_tp_mlp_shard_map, tp_mlp  # right as they are


def make_tp_train_step(mesh, tx):
    grad_fn = jax.jit(jax.value_and_grad(_loss))

    def step(params, opt_state, x, y):
        loss, grads = grad_fn(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
