"""RIGHT: the shard_map body walks its H/model hidden units in chunks of 8 with lax.fori_loop
(dynamic_slice of w1's columns and w2's rows), accumulating the local partial sum (the first
chunk starts the carry), then adds the partial sums over "model" with one psum after the loop.

Loses each_device_does_its_share_of_the_work: "each device does 13,292 FLOPs in the forward of your
shard_map version; one device does 412,160, so a share on a (8, 1) mesh is about 51,520, and yours
is less than 1/1.5 of that". On (8, 1) each device holds all H=64 hidden units: 8 chunks, a
while loop of 7 trips, and XLA's cost analysis counts a while body once, not per trip: the
program does its share, the FLOP count does not see it (on meshes where H/model <= 8 there is no loop).

Scores (--seed 20261130 and --seed 7, main mesh (4, 2) at both): without --sandbox 20/22, with
--sandbox 20/22; verbose output identical in both modes. Expected: 22/22.

Since the FLOPs count every trip of a loop's matmuls (graders/kit/hlo.py's uncounted_loop_flops,
the grader's fix): 22/22 at seeds 20261130 and 7.
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
    hl = w1_blk.shape[1]
    chunk = 8 if hl % 8 == 0 else hl

    def chunk_sum(i):
        a = lax.dynamic_slice_in_dim(w1_blk, i * chunk, chunk, axis=1)
        b = lax.dynamic_slice_in_dim(w2_blk, i * chunk, chunk, axis=0)
        return jax.nn.relu(x_blk @ a) @ b

    partial = lax.fori_loop(1, hl // chunk, lambda i, acc: acc + chunk_sum(i), chunk_sum(0))
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
    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
