"""WRONG: the reference's jitted step in a wrapper that trains each call on the batch it was given on
the previous call (an off-by-one in a hand-written prefetch: the first call trains on its own batch,
every later call on the one before), so batch k is trained on at step k + 1 and the first batch
twice. Natively on (2, 4), Adam, D=16, H=32, B=32, a new batch each step: losses 2.2639, 1.9521,
1.6727, 1.5407, 1.4059 where the reference's are 2.2639, 1.8291, 1.6652, 1.5382, 1.5481.

Scores 22/22 at --seed 20261130, 7 and 0, with and without --sandbox (22/22 on main too).
Should lose sgd_training_matches_single_device and adam_training_matches_single_device: 20/22.

Why: the second call reads the first call's x and y, so the judge reads it after a first call run
for real (probes.after_a_real_first_call), the kept batch a constant of that program. But the
judge's training runs give every one of their 5 steps the same x and y, the very values the probe's
first call was given, so the kept batch equals the batch given and the numbers are the reference's.
The probe's second call is given another batch (x reversed); the runs never are.
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
    @jax.jit
    def jitted(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    kept = {}

    def step(params, opt_state, x, y):
        batch = kept.get("batch", (x, y))  # off by one: the previous call's batch
        kept["batch"] = (x, y)
        return jitted(params, opt_state, *batch)

    return step
