"""Gradient accumulation over micro-batches in a shard_map step that sums each micro-batch's
gradient over "data": each device cuts its rows into 2 micro-batches (1 where its row count is
odd) and a lax.scan differentiates the loss of each with value_and_grad of the replicated weight
blocks, so shard_map adds each micro-batch's gradient over "data" inside the loop; the forward of
each micro-batch adds its partial sums over "model" with one psum. The numbers are the
single-device step's, but the gradients cross "data" once per micro-batch: twice what Megatron's
step moves there (at seed 20261130 on (4, 2), D=16, H=40, B=48: 1,280 numbers where Megatron
sums 640). tests/right/ex7/micro_batches_accumulated_in_fori_loop adds the micro-batches'
gradients up on each device first and sums them once.

20/22 in both modes at seeds 20261130 and 7.

loses: training_step_communicates_like_megatron: once a step
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


def _micro_batches(rows: int) -> int:
    """How many micro-batches each device's rows are cut into: 2 where they split evenly."""
    return 2 if rows % 2 == 0 else 1


def make_tp_train_step(mesh, tx):
    def local_grads(w1_blk, w2_blk, x_blk, y_blk, n):
        k = _micro_batches(x_blk.shape[0])
        xs = x_blk.reshape(k, -1, x_blk.shape[1])
        ys = y_blk.reshape(k, -1, y_blk.shape[1])

        def micro(carry, xy):
            loss, g1, g2 = carry
            xb, yb = xy

            def local_loss(a, b):
                return jnp.sum((_tp_mlp_local(a, b, xb) - yb) ** 2) / n

            l, (d1, d2) = jax.value_and_grad(local_loss, argnums=(0, 1))(w1_blk, w2_blk)
            return (loss + l, g1 + d1, g2 + d2), None

        # The loss differs from row block to row block (varying over "data"); the gradients come back
        # already added over "data" by shard_map.
        zero = (lax.pcast(jnp.zeros((), jnp.float32), ("data",), to="varying"), jnp.zeros_like(w1_blk),
                jnp.zeros_like(w2_blk))
        (loss, g1, g2), _ = lax.scan(micro, zero, (xs, ys))
        return lax.psum(loss, "data"), g1, g2

    def step(params, opt_state, x, y):
        grads_fn = jax.shard_map(lambda a, b, c, d: local_grads(a, b, c, d, y.size), mesh=mesh,
                                 in_specs=(W1_SPEC, W2_SPEC, X_SPEC, X_SPEC), out_specs=(P(), W1_SPEC, W2_SPEC))
        loss, g1, g2 = grads_fn(params["w1"], params["w2"], x, y)
        updates, opt_state = tx.update({"w1": g1, "w2": g2}, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return jax.jit(step)
