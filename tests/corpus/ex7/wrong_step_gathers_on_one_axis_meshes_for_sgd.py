"""WRONG: the training step is Megatron except on
meshes with an axis of one device when the optimizer state is momentum SGD's (optax TraceState):
there it gathers both weights whole inside the loss (reshard to P()), so on (1, n) every device
computes the whole model's forward and backward.

tests/corpus/ex7/step_gathers_on_one_axis_meshes gated on the optimizer too. Natively on (1, 8)
with optax.sgd(0.1, momentum=0.9): 2 all-gathers, no all-reduce, 85,508 FLOPs per device (the
reference: 1 all-reduce, 12,736); with Adam on (1, 8) it is Megatron's (1 all-reduce). Once graded
22/22 in both modes: the SGD step's collectives were read only on the technique mesh (both axes
split), and the one-axis read was of the Adam step from init_tp_state's output. Since the grader's
fix one SGD step is taken on (1, 8) and (8, 1) too (checks.one_axis_steps): on (1, 8) it
all-gathers both weights and each device does 7.9x its share: 18/22 in both modes at seeds
20261130, 7 and 276678.

loses: training_step_communicates_like_megatron: all-gathers of weight-sized arrays
loses: each_device_does_its_share_of_the_work: devices repeat each other's work
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


def _is_sgd(opt_state):
    is_trace = lambda s: isinstance(s, optax.TraceState)  # noqa: E731
    return any(is_trace(s) for s in jax.tree.leaves(opt_state, is_leaf=is_trace))


def make_tp_train_step(mesh, tx):
    one_axis = 1 in tuple(mesh.shape.values())

    def loss_fn(params, x, y, gather):
        if gather:
            params = {k: jax.sharding.reshard(v, P()) for k, v in params.items()}
            return jnp.mean((jax.nn.relu(x @ params["w1"]) @ params["w2"] - y) ** 2)
        return _loss(params, x, y)

    @jax.jit
    def step(params, opt_state, x, y):
        gather = one_axis and _is_sgd(opt_state)
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y, gather)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
