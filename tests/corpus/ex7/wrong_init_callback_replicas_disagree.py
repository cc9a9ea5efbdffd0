"""WRONG: init_tp_state places each parameter with
jax.make_array_from_callback whose callback returns the right block the first time it is asked for
an index and zeros on every later call for the same index: the replicas of w1 and w2 over "data"
(all but the first device holding each block) hold zeros, so on a mesh with data > 1 every data row
but the first computes with zero weights.

State that changes between calls, in the callback: natively on (2, 4) tp_mlp of the placed params
is right on the data row 0 devices and off by up to 58 on the data row 1 devices (as
tests/corpus/ex7/wrong_init_replicas_disagree). Was graded 22/22: make_array_from_callback runs eagerly
inside the judge's trace (on the host arrays) and the array it makes is read as one global value
(one replica per index); the state check's step runs on (1, 8), where nothing is replicated.

Since the grader's fix probes.placed_constants puts the callback's array back with NaN where copies of a
block differ (the array has no one value there), and the check says so.

Scores (--seed 20261130 and --seed 7): without --sandbox 20/22, with --sandbox 20/22 (22/22 in both
modes before the grader's fix). Should get 20/22.

loses: optimizer_state_carries_parameter_specs: no one value on every device
"""

import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import numpy as np

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
    placed = {}
    for k, v in params.items():
        served = set()

        def block(idx, v=v, served=served):
            key = tuple((s.start, s.stop) for s in idx)
            out = v[idx] if key not in served else np.zeros_like(v[idx])
            served.add(key)
            return out
        placed[k] = jax.make_array_from_callback(v.shape, NamedSharding(mesh, PARAM_SPECS[k]), block)
    return placed, tx.init(placed)


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
