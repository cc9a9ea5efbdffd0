"""RIGHT: the reference's jitted step in a wrapper that logs each step as a pickled StepRecord (a
NamedTuple defined in the module: step number and float(loss)) appended to a module-level list,
compact bytes for shipping to a logging process. Natively the reference's params, state,
placements and losses.

Scores (seeds 20261130, 7 and 0, with and without --sandbox): 13/22, every step check lost
(sgd_training_matches_single_device, adam_training_matches_single_device, training_step_is_jitted,
training_step_communicates_like_megatron, each_device_does_its_share_of_the_work,
optimizer_state_carries_parameter_specs) with "your code raised ConcretizationTypeError: ... The
problem arose with the `float` function". Before 02dad61 (a3b446c): 22/22. The same module without
pickle.dumps (the records kept as they are): 22/22. Should: 22/22.

Why: float() makes the trace fail only as a trace does, so the call is run for real, from the file
imported afresh (verdicts.imported_afresh). That copy's code runs as sys.modules[name] only while it
is imported; afterwards the name is the first copy again, so pickle, which looks a class up by its
module's name, finds the first copy's StepRecord, not the one the call made, and raises
PicklingError ("it's not the same object as ex7_megatron_tp.StepRecord"). The real call fails, and
step_read raises the trace's error instead.
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
