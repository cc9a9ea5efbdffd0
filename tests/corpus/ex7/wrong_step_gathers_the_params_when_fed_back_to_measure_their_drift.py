"""WRONG: the reference's update in a wrapper that keeps copies of the params it was given and, on
every later call, all-gathers both the kept params and the new ones whole onto every device to
measure how far the step moved them (the drift added times 0.0 to the loss it returns). Its first
call is the reference's; every later call moves whole weights between the devices. Natively the
reference's losses and placements.

The second call reads copies the first call made and did not return, so the judge reads it after a
first call run for real (probes.after_a_real_first_call), the kept copies constants there, and
compiles it: its all-gathers of the new weights show. 20/22 at --seed 20261130, 7 and 0, with and
without --sandbox.

loses: training_step_communicates_like_megatron: fed back the params and state its first call returned
loses: training_step_communicates_like_megatron: Yours also moves all-gathers
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
    return optax.apply_updates(params, updates), opt_state, loss


def make_tp_train_step(mesh, tx):
    first = jax.jit(lambda p, s, x, y: _update(p, s, x, y, tx))

    @jax.jit
    def later(params, opt_state, x, y, last):
        # The previous call's params all-gathered whole onto every device: how far this step moved them.
        whole = {k: jax.sharding.reshard(v, P()) for k, v in last.items()}
        new, opt_state, loss = _update(params, opt_state, x, y, tx)
        drift = sum(jnp.sum((jax.sharding.reshard(new[k], P()) - whole[k]) ** 2) for k in new)
        return new, opt_state, loss + 0.0 * drift

    kept = {}

    def step(params, opt_state, x, y):
        if "last" in kept:
            out = later(params, opt_state, x, y, kept["last"])
        else:
            out = first(params, opt_state, x, y)
        kept["last"] = {k: v.copy() for k, v in params.items()}
        return out

    return step
