"""WRONG: params placed right; every 2-D moment of the optimizer state is rebuilt by
jax.make_array_from_single_device_arrays on its parameter's sharding from blocks whose copies
disagree between the devices holding the same block: zeros on the mesh's first "data" row, 1e-3 on
every other row (Adam's mu and nu, momentum SGD's trace). Each data row then updates its copy of
the weights differently: the replicas of the model drift apart from the first step.

Once graded 22/22 in both modes: optimizer_state_carries_parameter_specs tested the values (and the
NaN of disagreeing copies) of the params only, the moments only for their placement; the only run
from init_tp_state's output is the one Adam step on (1, 8), whose "data" axis holds one device, so
there no block has two copies. Since the grader's fix the NaN that
program.single_device_arrays_assembled writes where copies differ is read in the moments too, on
every mesh (no step more): 20/22 in both modes at seeds 20261130, 7 and 276678.

loses: optimizer_state_carries_parameter_specs: no one value on every device
"""


import jax
import numpy as np
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
    state = tx.init(placed)

    def skewed(path, a):
        if getattr(a, "ndim", 0) != 2:
            return a
        name = [str(getattr(p, "key", "")) for p in path if str(getattr(p, "key", "")) in PARAM_SPECS][-1]
        sharding = NamedSharding(mesh, PARAM_SPECS[name])
        blocks = []
        for d, idx in sharding.addressable_devices_indices_map(a.shape).items():
            row = int(np.argwhere(mesh.devices == d)[0][0])
            blocks.append(jax.device_put(np.full(np.zeros(a.shape)[idx].shape, 0.0 if row == 0 else 1e-3, np.float32), d))
        return jax.make_array_from_single_device_arrays(a.shape, sharding, blocks)

    return placed, jax.tree_util.tree_map_with_path(skewed, state)


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
