"""WRONG: init_tp_state places the parameters right, and its optimizer state is tx.init of them,
except for momentum SGD (an optax TraceState) on a mesh with an axis of one device ((1, 8) and
(8, 1)): there the momentum is tx.init of the host arrays put whole on every device (P()). On
(1, 8) each device keeps the whole momentum of both weights, 8 times its share.

init_tp_state was given momentum SGD on the technique checks' mesh only (both axes split) and Adam
on the others (graders/README.md's ex7 row); the one-axis SGD steps start from the grader's own
placement, not from init_tp_state. Natively on (1, 8) with optax.sgd(0.1, momentum=0.9): trace
{'w1': P(), 'w2': P()}; with Adam on (1, 8) mu and nu are split like their parameters.

Kin to tests/corpus/ex7/wrong_moments_split_for_adam_only, which the SGD init on the technique
mesh catches; this one is right there. Was 22/22 in both modes (seeds 20261130 and 7). Since the
grader's fix init_tp_state is given both optimizers on every mesh (checks.state_configurations):
20/22 in both modes at seeds 20261130 and 7.

loses: optimizer_state_carries_parameter_specs: given momentum SGD on a (data, model) = (1, 8) mesh
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


def _has_trace(state) -> bool:
    return any(isinstance(s, optax.TraceState)
               for s in jax.tree.leaves(state, is_leaf=lambda s: isinstance(s, optax.TraceState)))


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    state = tx.init(placed)
    if _has_trace(state) and 1 in tuple(mesh.shape.values()):
        # Momentum SGD on a mesh with an axis of one device: the momentum whole on every device.
        state = jax.device_put(tx.init(params), NamedSharding(mesh, P()))
    return placed, state


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
