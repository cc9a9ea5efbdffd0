"""RIGHT: init_tp_state assembles each parameter from per-device blocks, as
tests/right/ex7/init_single_device_arrays.py does, but with the two functions imported by name at
module level (from jax import device_put, make_array_from_single_device_arrays).

Natively (8 CPU devices, (2, 4) and (4, 2)) it places w1 P(None, 'model'), w2 P('model', None),
the moments alike, and trains like the reference. Graded: optimizer_state_carries_parameter_specs
lost with "your code raised ValueError: jax.make_array_from_single_device_arrays requires a list
of concrete arrays as input, but got types {DynamicJaxprTracer}". program.single_device_arrays_assembled swaps the attributes jax.device_put and jax.make_array_from_single_device_arrays on the
jax module; names bound at import time (from jax import ...) are the unswapped originals.
Since the grader's fix the probe passes the learner's module to it, and the names of its globals bound to
those very functions are swapped too (and put back after the trace).

Scores (--seed 20261130 and --seed 7): without --sandbox 22/22, with --sandbox 22/22 (20/22 in
both modes before the grader's fix). Should get 22/22.
"""

import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from jax import device_put, make_array_from_single_device_arrays

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
        sharding = NamedSharding(mesh, PARAM_SPECS[k])
        blocks = [device_put(v[idx], d) for d, idx in sharding.addressable_devices_indices_map(v.shape).items()]
        placed[k] = make_array_from_single_device_arrays(v.shape, sharding, blocks)
    # The moments are zeros_like(params): made from the placed params, they inherit their split.
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
