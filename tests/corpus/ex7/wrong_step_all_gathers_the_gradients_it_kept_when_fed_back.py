"""WRONG: the reference's update whose jit also returns the gradients, which the wrapper keeps; every
later call all-gathers the gradients the call before computed whole onto every device (reshard to
P()) and splits them again, to measure how much the gradient turned (a metric added times 0.0 to
the loss it returns). Its first call is the reference's; every later call moves both whole
weight-sized gradients between the devices. Numbers and placements are the reference's.

Was 22/22 at --seed 20261130, 7 and 0, with and without --sandbox, once the second call was read
after a first call run for real (probes.after_a_real_first_call): the kept gradients, values the
first call left, were constants of that program, and XLA folds an all-gather of a constant (every
device holds the whole constant), so the judge's compiled fed-back program had none where the
learner's, taking the same values as arguments, has two. (20/22 before that reading, the gradients
then hidden inputs fed zeros.)

Since the grader's fix what the second call reads besides the arrays the first returned comes in as
inputs of its program, sent with the values the first call left, which the judge feeds when it
compiles it: the two all-gathers show. 20/22 with and without --sandbox at seeds 20261130, 7 and 0.

loses: training_step_communicates_like_megatron: fed back the params and state its first call returned
loses: training_step_communicates_like_megatron: Yours also moves all-gathers of weight-sized arrays
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



def _update(params, opt_state, x, y, tx):
    loss, grads = jax.value_and_grad(_loss)(params, x, y)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss, grads


def make_tp_train_step(mesh, tx):
    first = jax.jit(lambda p, s, x, y: _update(p, s, x, y, tx))

    @jax.jit
    def later(params, opt_state, x, y, last):
        new, opt_state, loss, grads = _update(params, opt_state, x, y, tx)
        # The last call's gradients gathered whole onto every device and split again: how much
        # the gradient turned since (a metric, added times 0.0 to the loss returned).
        before = {k: jax.sharding.reshard(jax.sharding.reshard(v, P()), PARAM_SPECS[k]) for k, v in last.items()}
        turn = sum(jnp.sum(grads[k] * before[k]) for k in grads)
        return new, opt_state, loss + 0.0 * turn, grads

    kept = {}

    def step(params, opt_state, x, y):
        if "grads" in kept:
            new, opt_state, loss, kept["grads"] = later(params, opt_state, x, y, kept["grads"])
        else:
            new, opt_state, loss, kept["grads"] = first(params, opt_state, x, y)
        return new, opt_state, loss

    return step
