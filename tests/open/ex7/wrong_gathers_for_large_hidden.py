"""WRONG: Megatron only for small models: where H >= 128 (a size the grader never draws)
tp_mlp, the shard_map body and the step gather both weights whole (all-gather) and every device
computes the whole hidden layer.

The grader draws D and H from 16..64 (checks.SIZES) and B from 32..96: a module that switches
to gathering above the drawn sizes is never seen doing it. Natively, on a (2, 4) mesh with D=32:
H=64 compiles to 1 all-reduce in both forwards, H=128 to 2 all-gathers (and no all-reduce).

Scores (--seed 20261130 and --seed 7, main mesh (4, 2) at both): without --sandbox 22/22, with
--sandbox 22/22; verbose output identical in both modes. Expected: 8/22 or so where H >= 128 (the technique checks lost); ? as a grading policy.
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
    if w1.shape[1] >= 128:
        w1 = jax.sharding.reshard(w1, P())
        w2 = jax.sharding.reshard(w2, P())
        return jax.nn.relu(x @ w1) @ w2
    h = jax.nn.relu(x @ w1)  # column parallel: each device's own hidden units, no communication
    # Row parallel: the contracting dim is split, so the partial sums are added by one all-reduce;
    # on Explicit axes JAX asks where the sum should live.
    return jnp.matmul(h, w2, out_sharding=X_SPEC)


def _tp_mlp_local(w1_blk, w2_blk, x_blk):
    if w1_blk.shape[1] * lax.axis_size("model") >= 128:
        w1f = lax.all_gather(w1_blk, "model", axis=1, tiled=True)
        w2f = lax.all_gather(w2_blk, "model", axis=0, tiled=True)
        return jax.nn.relu(x_blk @ w1f) @ w2f
    partial = jax.nn.relu(x_blk @ w1_blk) @ w2_blk  # (B/data, D): this device's share of the sum
    return lax.psum(partial, "model")


def make_tp_mlp_shard_map(mesh):
    return jax.shard_map(_tp_mlp_local, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC,
                         check_vma=False)


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
