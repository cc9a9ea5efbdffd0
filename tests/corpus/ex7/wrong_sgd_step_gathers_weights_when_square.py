"""WRONG: Megatron except for momentum SGD on square weights (D == H): there the training step
reshards both weights to P() (all-gather) and every device computes the whole model's forward
and backward. It tells momentum SGD by the optimizer state's type (an optax TraceState).

configs() draws D == H on the other both-axes mesh only, where the Adam run is taken; momentum
SGD runs on the technique mesh (D != H), and its one-axis steps (checks.one_axis_steps) were at that
mesh's sizes, so no SGD step was traced on square weights (tests/corpus/ex7/
wrong_gate_square_weights, gated on the shape alone, is caught by the Adam step there).
Natively on (2, 4) with D = H = 40, B=80 and optax.sgd(0.1, momentum=0.9): 2 all-gathers of the
weights and 663,303 FLOPs per device; with Adam 2 all-reduces, as the reference.

Was 22/22 in both modes (seeds 20261130 and 7). Since the grader's fix the SGD step on (1, 8) is
taken at square sizes (checks.one_axis_sizes: the Adam run's D == H, a batch B != D): 18/22 in both
modes at seeds 20261130, 7 and 276678.

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
    h = jax.nn.relu(x @ w1)  # column parallel: each device's own hidden units
    return jnp.matmul(h, w2, out_sharding=X_SPEC)  # row parallel: one all-reduce over "model"


def _tp_mlp_local(w1_blk, w2_blk, x_blk):
    return lax.psum(jax.nn.relu(x_blk @ w1_blk) @ w2_blk, "model")


def make_tp_mlp_shard_map(mesh):
    return jax.shard_map(_tp_mlp_local, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC)


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    return placed, tx.init(placed)


def _has_trace(opt_state) -> bool:
    """Momentum SGD: an optax TraceState in the optimizer state."""
    return any(isinstance(s, optax.TraceState)
               for s in jax.tree.leaves(opt_state, is_leaf=lambda s: isinstance(s, optax.TraceState)))


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        if _has_trace(opt_state) and params["w1"].shape[0] == params["w1"].shape[1]:
            params_used = jax.tree.map(lambda p: jax.sharding.reshard(p, P()), params)  # both weights whole
        else:
            params_used = params
        loss, grads = jax.value_and_grad(_loss)(params_used, x, y)
        grads = {k: jax.sharding.reshard(g, PARAM_SPECS[k]) for k, g in grads.items()}
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
