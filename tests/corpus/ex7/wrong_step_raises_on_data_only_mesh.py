"""WRONG: on meshes whose "model" axis holds one device ((8, 1)) the training step gathers the batch
(x and y resharded to P()) and multiplies it by w1 as it arrives; Megatron everywhere else.

Natively on (8, 1) the step RAISES for both optimizers (jax ShardingTypeError: "Contracting
dimensions are sharded and it is ambiguous how the output should be sharded": x gathered to P()
against w1 still typed P(None, 'model')); on (2, 4), (4, 2) and (1, 8) it is the reference. Once
graded 22/22 in both modes: no training step was run on (8, 1). Since the grader's fix one SGD step
is taken on (1, 8) and (8, 1) too (checks.one_axis_steps), and the checks that read it fail with
the learner's error, the mesh named: 17/22 in both modes at seeds 20261130, 7 and 276678.

loses: training_step_is_jitted: your training step on a (8, 1) mesh
loses: training_step_communicates_like_megatron: your training step on a (8, 1) mesh
loses: each_device_does_its_share_of_the_work: your training step on a (8, 1) mesh
"""

import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

W1_SPEC = P(None, "model")  # column split: each device owns H/model hidden units
W2_SPEC = P("model", None)  # row split: the same hidden units' rows of w2
X_SPEC = P("data", None)    # the batch split over "data"; also the output's spec
PARAM_SPECS = {"w1": W1_SPEC, "w2": W2_SPEC}


def tp_mlp(w1, w2, x):
    h = jax.nn.relu(x @ w1)  # column parallel: each device's own hidden units, no communication
    # Row parallel: the contracting dim is split, so the partial sums are added by one all-reduce;
    # on Explicit axes JAX asks where the sum should live.
    return jnp.matmul(h, w2, out_sharding=X_SPEC)


def _tp_mlp_local(w1_blk, w2_blk, x_blk):
    partial = jax.nn.relu(x_blk @ w1_blk) @ w2_blk  # (B/data, D): this device's share of the sum
    return lax.psum(partial, "model")


def make_tp_mlp_shard_map(mesh):
    return jax.shard_map(_tp_mlp_local, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC)


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    # The moments are zeros_like(params): made from the placed params, they inherit their split.
    return placed, tx.init(placed)


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


def make_tp_train_step(mesh, tx):
    no_model = mesh.shape["model"] == 1

    @jax.jit
    def step(params, opt_state, x, y):
        if no_model:
            x, y = jax.sharding.reshard(x, P()), jax.sharding.reshard(y, P())
            loss, grads = jax.value_and_grad(
                lambda p: jnp.mean((jax.nn.relu(x @ p["w1"]) @ p["w2"] - y) ** 2))(params)
        else:
            loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
