"""Megatron's forward and a Megatron training step in a shard_map, under jax.checkpoint, that runs
its forward and backward twice: a second pass over the same blocks behind lax.optimization_barrier
(so XLA cannot share it with the first) whose loss and gradients are averaged with the first's.
Each pass sums its (B/data, D) partial sums over "model" once; the averaged gradients are psum'd
over "data" once. The numbers are right, but each device does twice its share of the work (and
the hidden layer, under jax.checkpoint, is recomputed in each backward).

Was: the step holds jax.checkpoint, so each_device_does_its_share_of_the_work allowed it up to 1.5 x
twice a share (RECOMPUTE_ALLOWANCE: what a remat step may recompute), and
training_step_communicates_like_megatron allows twice Megatron's partial sums over 'model'. The
second pass fits both allowances: 100,771 FLOPs on (4, 2) at seed 20261130, 2.5x a plain share
(40,368), 1.25x the allowed "share" of 80,736; the two (B/data, D) psums over 'model' are exactly
the doubled budget. A step under jax.checkpoint recomputes at most its forward (about a third of a
step), not a whole second forward and backward.

Scored 22/22 at seeds 20261130 and 7 with and without --sandbox (22/22 at 276678 without).

Since the grader's fix (a step under jax.checkpoint held to RECOMPUTE_ALLOWANCE = 1.9 times the
grader's own Megatron step compiled on the same mesh, per device; right remat steps measure 1.00x
to 1.75x of it): 100,771 FLOPs where that step does 43,665 on (4, 2) at seed 20261130, 2.31x.
20/22 at seeds 20261130, 7 and 0, with and without --sandbox, the same message.
Its two psums over 'model' still fit the doubled budget: a right step whose psum lies under
jax.checkpoint (tests/right/ex7/remat_in_shard_map_whole_local_loss.py) may sum twice there too.

loses: each_device_does_its_share_of_the_work: the step repeats work beyond what rematerialising recomputes
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


def _tp_mlp_local(w1_blk, w2_blk, x_blk):
    return lax.psum(jax.nn.relu(x_blk @ w1_blk) @ w2_blk, "model")


def make_tp_mlp_shard_map(mesh):
    return jax.shard_map(_tp_mlp_local, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC)


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    return placed, tx.init(placed)


@jax.checkpoint
def _hidden(w1_blk, x_blk):
    return jax.nn.relu(x_blk @ w1_blk)


def _local_loss(w1_blk, w2_blk, x_blk, y_blk, n):
    return jnp.sum((lax.psum(_hidden(w1_blk, x_blk) @ w2_blk, "model") - y_blk) ** 2) / n


def make_tp_train_step(mesh, tx):
    def local_grads(w1_blk, w2_blk, x_blk, y_blk, n):
        a, b = (lax.pcast(w, ("data",), to="varying") for w in (w1_blk, w2_blk))
        l1, (d1, e1) = jax.value_and_grad(_local_loss, argnums=(0, 1))(a, b, x_blk, y_blk, n)
        a2, b2, x2, y2 = lax.optimization_barrier((a, b, x_blk, y_blk))  # a second pass, not shared
        l2, (d2, e2) = jax.value_and_grad(_local_loss, argnums=(0, 1))(a2, b2, x2, y2, n)
        return (lax.psum((l1 + l2) / 2, "data"), lax.psum((d1 + d2) / 2, "data"),
                lax.psum((e1 + e2) / 2, "data"))

    def step(params, opt_state, x, y):
        grads_fn = jax.shard_map(lambda a, b, c, d: local_grads(a, b, c, d, y.size), mesh=mesh,
                                 in_specs=(W1_SPEC, W2_SPEC, X_SPEC, X_SPEC), out_specs=(P(), W1_SPEC, W2_SPEC))
        loss, g1, g2 = grads_fn(params["w1"], params["w2"], x, y)
        updates, opt_state = tx.update({"w1": g1, "w2": g2}, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return jax.jit(step)
