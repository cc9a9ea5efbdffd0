"""WRONG: wrong_step_forward_twice_beside_a_differentiated_checkpoint_saving_everything.py with the
checkpoint's policy one of the learner's own, `lambda *_, **__: True` (save every value: nothing
recomputed), sent to the judge as a never-called placeholder. The judge cannot tell what a policy
of the learner's own saves, and the differentiated checkpoint earns the step RECOMPUTE_ALLOWANCE and
the doubled 'model' budget all the same. The values are right; each device runs its forward twice.

Per-device FLOPs 1.32-1.39x the grader's own Megatron step (seeds 20261130, 7, 0; run mesh,
(1, 8), (8, 1)). 22/22 with and without --sandbox at seeds 20261130, 7 and 0. Should be 18/22, as
tests/corpus/ex7/wrong_step_forward_twice_beside_a_checkpoint_recomputing_nothing.py.
"""
import functools
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

W1_SPEC = P(None, "model")
W2_SPEC = P("model", None)
X_SPEC = P("data", None)
PARAM_SPECS = {"w1": W1_SPEC, "w2": W2_SPEC}


def tp_mlp(w1, w2, x):
    h = jax.nn.relu(x @ w1)
    return jnp.matmul(h, w2, out_sharding=X_SPEC)


def _tp_mlp_local(w1_blk, w2_blk, x_blk):
    return lax.psum(jax.nn.relu(x_blk @ w1_blk) @ w2_blk, "model")


def make_tp_mlp_shard_map(mesh):
    return jax.shard_map(_tp_mlp_local, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC)


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    return placed, tx.init(placed)


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


@functools.partial(jax.checkpoint, policy=lambda *_, **__: True)  # a policy of its own: save every value
def _hidden(w1, x):
    return jax.nn.relu(x @ w1)


def _loss_ckpt(params, x, y):
    out = jnp.matmul(_hidden(params["w1"], x), params["w2"], out_sharding=X_SPEC)
    return jnp.mean((out - y) ** 2)


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        _, grads = jax.value_and_grad(_loss_ckpt)(params, x, y)
        loss = _loss(lax.optimization_barrier(params), x, y)  # the loss again, by a forward of its own
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
