"""WRONG: init_tp_state assembles each parameter from per-device blocks with
jax.make_array_from_single_device_arrays; the first device holding each block gets it right, but
every other replica (w1 and w2 are replicated over "data") gets zeros. The global array has
inconsistent replicas: on a mesh with data > 1, devices of data rows other than the first compute
with zero weights, so training from it is wrong (natively y differs by data row).

Natively on (2, 4): tp_mlp of the placed params is right on the data row 0 devices and off by up
to 58 on the data row 1 devices (their w1, w2 blocks are zeros). Graded 22/22: the judge reads
init_tp_state's traced program, where program.single_device_arrays_assembled takes "the first
device's block (in the sharding's device order)" of a replicated index, so the assembled array is
right; the Adam step from init's output is taken on (1, 8), where nothing is replicated; the eager
call's report is only its placement (specs), not the values of every replica.

Since the grader's fix program.single_device_arrays_assembled reads copies of a block that differ as NaN (the array has no one value there), and the check says so.

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
        sharding = NamedSharding(mesh, PARAM_SPECS[k])
        seen, blocks = set(), []
        for d in mesh.devices.flat:
            idx = sharding.addressable_devices_indices_map(v.shape)[d]
            key = tuple((s.start, s.stop) for s in idx)
            block = v[idx] if key not in seen else np.zeros_like(v[idx])
            seen.add(key)
            blocks.append(jax.device_put(block, d))
        placed[k] = jax.make_array_from_single_device_arrays(v.shape, sharding, blocks)
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
