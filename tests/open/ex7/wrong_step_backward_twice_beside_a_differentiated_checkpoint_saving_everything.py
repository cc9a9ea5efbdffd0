"""WRONG: the step in shard_map with its hidden layer under jax.checkpoint with policy
jax.checkpoint_policies.everything_saveable (differentiated, recomputing nothing), whose backward
runs twice: jax.vjp once, then the vjp function pulled back twice (the second cotangent through
lax.optimization_barrier, so XLA cannot share them), the two gradients averaged on each device and
summed over 'data' once, so its collectives are exactly Megatron's. The numbers are right; each
device does its backward twice.

Per-device FLOPs 1.57-1.60x the grader's own Megatron step compiled on the same mesh (seeds
20261130, 7, 0; run mesh, (1, 8), (8, 1)), under RECOMPUTE_ALLOWANCE = 1.9 (right remat steps measure
1.00-1.40x at one level of jax.checkpoint). Without the checkpoint it would be held to 1.25x and lose.

22/22 with and without --sandbox at seeds 20261130, 7 and 0. Should be 20/22
(each_device_does_its_share_of_the_work): a checkpoint that recomputes nothing should buy no
allowance (see wrong_step_forward_twice_beside_a_differentiated_checkpoint_saving_everything.py).
"""
import functools
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


def _tp_mlp_local(w1_blk, w2_blk, x_blk):
    return lax.psum(jax.nn.relu(x_blk @ w1_blk) @ w2_blk, "model")


def make_tp_mlp_shard_map(mesh):
    return jax.shard_map(_tp_mlp_local, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC)


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    return placed, tx.init(placed)


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


@functools.partial(jax.checkpoint, policy=jax.checkpoint_policies.everything_saveable)
def _hidden(w1_blk, x_blk):
    return jax.nn.relu(x_blk @ w1_blk)


def _local_loss(w1_blk, w2_blk, x_blk, y_blk, n):
    return jnp.sum((lax.psum(_hidden(w1_blk, x_blk) @ w2_blk, "model") - y_blk) ** 2) / n


def make_tp_train_step(mesh, tx):
    def local_grads(w1_blk, w2_blk, x_blk, y_blk, n):
        a, b = (lax.pcast(w, ("data",), to="varying") for w in (w1_blk, w2_blk))
        l, back = jax.vjp(lambda a, b: _local_loss(a, b, x_blk, y_blk, n), a, b)
        d1, e1 = back(jnp.ones_like(l))
        d2, e2 = back(lax.optimization_barrier(jnp.ones_like(l)))  # the backward again, not shared
        # Averaged on the device, then summed over 'data' once, as Megatron's step does.
        return lax.psum(l, "data"), lax.psum((d1 + d2) / 2, "data"), lax.psum((e1 + e2) / 2, "data")

    def step(params, opt_state, x, y):
        grads_fn = jax.shard_map(lambda a, b, c, d: local_grads(a, b, c, d, y.size), mesh=mesh,
                                 in_specs=(W1_SPEC, W2_SPEC, X_SPEC, X_SPEC), out_specs=(P(), W1_SPEC, W2_SPEC))
        loss, g1, g2 = grads_fn(params["w1"], params["w2"], x, y)
        updates, opt_state = tx.update({"w1": g1, "w2": g2}, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return jax.jit(step)
