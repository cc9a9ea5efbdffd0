"""RIGHT: the shard_map version is manual over "model" only (axis_names={"model"}); "data" stays
an Explicit axis inside the body, so x keeps its row split by type and the body sees (B, D) typed
P("data", None) (each device computes its B/data rows). One psum over "model" of the partial
sums. On a mesh whose "model" axis has one device, XLA's partitioner refuses a partial-manual
all-reduce (RET_CHECK IsManualSubgroup, a JAX/XLA limitation seen natively), so there the module
goes fully manual, as the reference does.

Loses shard_map_psums_partial_sums_once_over_model: "your psum adds an array of shape (48, 16); on
this (4, 2) mesh each device's partial sum ... has shape (12, 16) (B/data, D)". The judge reads the
psum operand's global (typed) shape; under partial-manual shard_map "data" is still an Explicit
axis, so the (B, D) operand typed P("data", None) is (B/data, D) on each device. The compiled forward
holds one all-reduce on every mesh and each device does its 1/8 share (the other checks pass).

Scores (--seed 20261130 and --seed 7, main mesh (4, 2) at both): without --sandbox 20/22, with
--sandbox 20/22; verbose output identical in both modes. Expected: 22/22.

Since the psum's operand is read per device (its type's shape divided along the axes its spec
splits, probes.device_shape): 22/22 at seeds 20261130 and 7.
"""

import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

W1_SPEC = P(None, "model")
W2_SPEC = P("model", None)
X_SPEC = P("data", None)
PARAM_SPECS = {"w1": W1_SPEC, "w2": W2_SPEC}


def tp_mlp(w1, w2, x):
    h = jax.nn.relu(x @ w1)
    return jnp.matmul(h, w2, out_sharding=X_SPEC)


def make_tp_mlp_shard_map(mesh):
    def body(w1_blk, w2_blk, x_rows):
        partial = jax.nn.relu(x_rows @ w1_blk) @ w2_blk
        return lax.psum(partial, "model")
    if mesh.shape["model"] == 1:  # XLA cannot partition a partial-manual psum over a size-1 axis
        return jax.shard_map(body, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC)
    return jax.shard_map(body, mesh=mesh, in_specs=(P(None, "model"), P("model", None), P()),
                         out_specs=P(), axis_names={"model"})


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
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
