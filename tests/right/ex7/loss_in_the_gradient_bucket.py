"""Right: gradient bucketing (tests/right/ex7/gradients_all_reduced_in_one_flat_bucket) with the
loss in the same bucket: in a shard_map step each device differentiates its own copies of its
weight blocks on its own rows, flattens both gradient blocks and its loss into one buffer and adds
it over "data" with one psum, then cuts the blocks and the loss back out (the loss comes out one
copy a device of "model", P("model"), and the step takes their mean). One all-reduce over "data"
moves Megatron's two gradient blocks and the loss: one number more than the bucket without it.

training_step_communicates_like_megatron accepts a bucket over "data" whose size is a sum of
Megatron's arrays there, but the loss (a small all-reduce) is not one of the sizes summed
(sums_of(mine["data"]) leaves it out), so the bucket of 2 * D * H/model + 1 numbers is neither a
bucket nor a piece: "all-reduces of arrays of shape (641,)" at seed 20261130 on (4, 2) (D=16,
H=40, B=48), (1025,) at seed 7, (193,) at seed 276678.

Full marks: a bucket of Megatron's arrays over "data" may carry its loss too.
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
        # Each device's own copies of its blocks: their gradients are its rows' share, which the
        # step adds over "data" itself, both in one bucket (one flat buffer, one all-reduce).
        a, b = (lax.pcast(w, ("data",), to="varying") for w in (w1_blk, w2_blk))

        def local_loss(a, b):
            return jnp.sum((_tp_mlp_local(a, b, x_blk) - y_blk) ** 2) / n

        loss, (g1, g2) = jax.value_and_grad(local_loss, argnums=(0, 1))(a, b)
        # The loss rides in the same bucket: one all-reduce over "data" for everything.
        bucket = lax.psum(jnp.concatenate([g1.ravel(), g2.ravel(), loss[None]]), "data")
        g1 = bucket[:g1.size].reshape(g1.shape)
        g2 = bucket[g1.size:g1.size + g2.size].reshape(g2.shape)
        # The loss came out of the bucket as varying over "model" (the bucket holds blocks): one copy a
        # device, every copy the same; the step takes their mean.
        return bucket[-1:], g1, g2

    def step(params, opt_state, x, y):
        grads_fn = jax.shard_map(lambda a, b, c, d: local_grads(a, b, c, d, y.size), mesh=mesh,
                                 in_specs=(W1_SPEC, W2_SPEC, X_SPEC, X_SPEC), out_specs=(P("model"), W1_SPEC, W2_SPEC))
        losses, g1, g2 = grads_fn(params["w1"], params["w2"], x, y)
        loss = jnp.mean(losses)
        updates, opt_state = tx.update({"w1": g1, "w2": g2}, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return jax.jit(step)
