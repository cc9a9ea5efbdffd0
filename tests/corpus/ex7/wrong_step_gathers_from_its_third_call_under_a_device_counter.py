"""WRONG: a jitted step that carries a device step counter `t` (held by the wrapper) and runs, under
lax.cond(t >= 2, ...), Megatron's update for its first two calls and from the third on an update
that gathers both weights whole (reshard to P()) and differentiates the whole model on every
device. Natively the reference's losses; from step 3 every device holds and computes with whole
weights.

The judge reads the fed-back call after a first call run for real, `t` a constant at 1 there, so the
cond never takes the gathering branch in its runs; but XLA keeps both branches of the cond in the
compiled step (the first call's program, `t` a constant at 0, too), and the collectives and FLOPs
read there hold the gathering branch: 18/22 at --seed 20261130, 7 and 0, with and without --sandbox.
tests/open/ex7/wrong_step_halves_its_updates_every_two_steps_by_a_device_counter.py acts from the
same t = 2 through numbers only, which no compiled program shows.

loses: training_step_communicates_like_megatron: Yours also moves all-gathers of weight-sized arrays
loses: each_device_does_its_share_of_the_work: devices repeat each other's work
"""
import functools

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



def _megatron(params, opt_state, x, y, tx):
    loss, grads = jax.value_and_grad(_loss)(params, x, y)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def _gathered(params, opt_state, x, y, tx):
    # Every device gathers both weights whole and differentiates the whole model on its rows.
    whole = {k: jax.sharding.reshard(v, P()) for k, v in params.items()}
    loss, grads = jax.value_and_grad(
        lambda p: jnp.mean((jax.nn.relu(x @ p["w1"]) @ p["w2"] - y) ** 2))(whole)
    grads = {k: jax.sharding.reshard(g, PARAM_SPECS[k]) for k, g in grads.items()}
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, jax.sharding.reshard(loss, P())


def make_tp_train_step(mesh, tx):
    @jax.jit
    def jitted(params, opt_state, x, y, t):
        out = lax.cond(t >= 2, functools.partial(_gathered, tx=tx), functools.partial(_megatron, tx=tx),
                       params, opt_state, x, y)
        return *out, t + 1

    counter = [jnp.zeros((), jnp.int32)]

    def step(params, opt_state, x, y):
        new, opt_state, loss, counter[0] = jitted(params, opt_state, x, y, counter[0])
        return new, opt_state, loss

    return step
