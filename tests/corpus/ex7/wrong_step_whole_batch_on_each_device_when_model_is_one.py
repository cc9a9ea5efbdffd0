"""WRONG: on meshes whose "model" axis
holds one device ((8, 1)), the training step gathers the batch (x and y resharded to P()) so every
device computes the forward and backward of the WHOLE batch (8x its share), all-gathers of x and y;
Megatron everywhere else. Numbers right.

Natively on (8, 1) with Adam: 2 all-gathers (x and y), 98,313 FLOPs per device where the
reference's step has 1 all-reduce and 24,970 (89,088 vs 15,745 with momentum SGD). Once graded
22/22 in both modes: no training step was compiled or run on (8, 1). Since the grader's fix one
SGD step is taken there too (checks.one_axis_steps), compiled, and read for its collectives (2
all-gathers of whole batches) and its per-device FLOPs (8.0x a 1/8 share of the grader's own
one-device step; the reference 1.14x): 18/22 in both modes at seeds 20261130, 7 and 276678.

loses: training_step_communicates_like_megatron: whole batches
loses: each_device_does_its_share_of_the_work: devices repeat each other's work
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
    # The moments are zeros_like(params): made from the placed params, they inherit their split.
    return placed, tx.init(placed)


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


def make_tp_train_step(mesh, tx):
    no_model = mesh.shape["model"] == 1

    @jax.jit
    def step(params, opt_state, x, y):
        if no_model:
            x, y = jax.sharding.reshard(x, P()), jax.sharding.reshard(y, P())

            def whole(p):
                p = {k: jax.sharding.reshard(v, P()) for k, v in p.items()}  # whole already: "model" is 1
                return jnp.mean((jax.nn.relu(x @ p["w1"]) @ p["w2"] - y) ** 2)
            loss, grads = jax.value_and_grad(whole)(params)
        else:
            loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
