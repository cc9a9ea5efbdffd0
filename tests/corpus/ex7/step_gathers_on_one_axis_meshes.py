"""WRONG: the training step is Megatron only on meshes where both axes have more than one device;
on a mesh with an axis of one device it gathers both weights whole (reshard to P()) inside the
loss, so on a (1, n) mesh every device computes the whole model's forward and backward (compiled
natively on (1, 8): 2 all-gathers and no all-reduce, where Megatron's step has none gathered; on
(n, 1) the weights are whole already and nothing changes).

Once graded 22/22 in both modes (--seed 20261130 and --seed 7): the step's collectives were read on
the two meshes where both axes are larger than 1 only. Since the grader's fix the state check's one Adam
step from init_tp_state's output is taken on (1, 8) and compiled whole there (in place of its
evaluation on the other both-axes mesh: no more compiles), and training_step_communicates_like_megatron
reads its collectives: 20/22 in both modes at both seeds, verbose output identical. Since one SGD
step is also taken on (1, 8) and (8, 1), compiled whole and read for its FLOPs too: 18/22 (seed
20261130).

loses: training_step_communicates_like_megatron: all-gathers of weight-sized arrays
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
    one_axis = 1 in tuple(mesh.shape.values())

    def loss_fn(params, x, y):
        if one_axis:
            params = {k: jax.sharding.reshard(v, P()) for k, v in params.items()}
            return jnp.mean((jax.nn.relu(x @ params["w1"]) @ params["w2"] - y) ** 2)
        return _loss(params, x, y)

    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
