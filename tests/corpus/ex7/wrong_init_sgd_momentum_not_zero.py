"""WRONG: init_tp_state places the parameters right and returns tx.init's state, but with momentum
SGD's trace replaced by a tenth of the placed parameters (a "warm" momentum, placed like them)
instead of zeros: training from init_tp_state's output takes a different first step from the
single-device tx.init's (every update has 0.9 * 0.1 * params more). Adam's moments are left as
tx.init made them.

The state check now holds the values of init_tp_state's optimizer state to tx.init's of the given
params (it read only the params' values, the moments' placement and NaN before, and ran no step from
the momentum-SGD state). Scores (seeds 20261130 and 7, both modes): 20/22.

loses: optimizer_state_carries_parameter_specs: entries differ from what tx.init(params) gives
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
    state = tx.init(placed)
    # A "warm" momentum: SGD's trace starts at a tenth of the parameters instead of zeros (placed
    # like them), so the first step already moves along the weights.
    return placed, jax.tree.map(
        lambda s: optax.TraceState(trace=jax.tree.map(lambda p: 0.1 * p, placed)) if isinstance(s, optax.TraceState) else s,
        state, is_leaf=lambda s: isinstance(s, optax.TraceState))


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
