"""RIGHT: the reference's jitted step in a wrapper that logs pickle.dumps(StepRecord(step,
float(loss))) each call, StepRecord a NamedTuple defined in the module.

Full marks. It scored 13/22 while a step called for real came from the learner's file imported
afresh with the first copy back in sys.modules: pickle found another StepRecord class there. Now the
real call comes from the module as imported, and a copy imported afresh (only where a tracer of the
grader's got in the way) stands in sys.modules while its step runs (verdicts.standing_in).
"""
import pickle
from typing import NamedTuple

import numpy as np
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



class StepRecord(NamedTuple):
    step: int
    loss: float


HISTORY = []  # pickled StepRecords, compact for shipping to a logging process


def make_tp_train_step(mesh, tx):
    @jax.jit
    def jitted(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def step(params, opt_state, x, y):
        new_params, new_state, loss = jitted(params, opt_state, x, y)
        HISTORY.append(pickle.dumps(StepRecord(len(HISTORY), float(loss))))
        return new_params, new_state, loss

    return step
