"""WRONG: init_tp_state builds the optimizer state from the host arrays (every moment whole on
every device) and then splits only Adam's moments: it rebuilds each optax ScaleByAdamState with mu
and nu made from the placed params. SGD's momentum (optax's TraceState) stays replicated, so with
optax.sgd(momentum=0.9) each device keeps the whole momentum of both weights.

The judge reads init_tp_state (its program and the worker's report) only for optax.adam
(checks.state_runs: OPTIMIZERS["adam"]); with Adam this module's moments are split right. Natively,
on a (2, 4) mesh with optax.sgd(0.1, momentum=0.9), both momentum leaves come out P().

Scores (--seed 20261130 and --seed 7, main mesh (4, 2) at both): without --sandbox 22/22, with
--sandbox 22/22; verbose output identical in both modes. Expected: 20/22 (optimizer_state_carries_parameter_specs lost).

loses: optimizer_state_carries_parameter_specs: the optimizer state's moment opt_state[0].trace

Since init_tp_state is given momentum SGD on the technique checks' mesh: 20/22.
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
    state = tx.init({k: jnp.asarray(v) for k, v in params.items()})

    def split_adam(s):
        if isinstance(s, optax.ScaleByAdamState):
            return s._replace(mu=jax.tree.map(jnp.zeros_like, placed), nu=jax.tree.map(jnp.zeros_like, placed))
        return s

    return placed, jax.tree.map(split_adam, state, is_leaf=lambda s: isinstance(s, optax.ScaleByAdamState))


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
