"""WRONG: Megatron only for the grader's two optimizers: unless opt_state holds an optax TraceState
(momentum SGD) or a ScaleByAdamState (Adam, AdamW), the training step reshards both weights to
P() (all-gather) and every device computes the whole model. With optax.sgd(0.1) (no momentum:
an EmptyState), rmsprop, lion or adafactor it gathers. The grader runs optax.sgd(0.1,
momentum=0.9) and optax.adam(1e-2) only (probes.make_tx). Natively on (2, 4) with
optax.sgd(0.1), D=40, H=48, B=80: 2 all-gathers of the weights, 791,623 FLOPs per device.

A finite-configuration case like tests/open/ex7/wrong_gathers_for_large_hidden; ? as a grading
policy (the stub says make_tp_train_step takes any tx).

Scores (--seed 20261130 and --seed 7, main mesh (4, 2) at both): without --sandbox 22/22, with
--sandbox 22/22 (seed 20261130). Expected: 18/22 with another optimizer; ? as a policy.
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


def _known_optimizer(opt_state) -> bool:
    """Momentum SGD (optax TraceState) or Adam (ScaleByAdamState)."""
    kinds = (optax.TraceState, optax.ScaleByAdamState)
    return any(isinstance(s, kinds) for s in jax.tree.leaves(opt_state, is_leaf=lambda s: isinstance(s, kinds)))


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        if not _known_optimizer(opt_state):
            params_used = jax.tree.map(lambda p: jax.sharding.reshard(p, P()), params)  # both weights whole
        else:
            params_used = params
        loss, grads = jax.value_and_grad(_loss)(params_used, x, y)
        grads = {k: jax.sharding.reshard(g, PARAM_SPECS[k]) for k, g in grads.items()}
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
