"""Right: gradient bucketing (as PyTorch's DDP does it): in a shard_map step each device
differentiates its own copies of its weight blocks (lax.pcast to varying over "data") on its own
rows, flattens both gradient blocks into one buffer and adds it over "data" with one psum, then
cuts the two blocks back out; the loss is psum'd on its own. Each device moves exactly the
values of Megatron's two gradient all-reduces, in one collective.

Full marks: the bucket is summed over "data", where Megatron sums the same two gradient blocks
(2 * D * H/model numbers in all); a gather of whole updates by a zero-padded flat psum
(tests/corpus/ex7/step_assembles_updates_by_flat_psum) sums over "model" and loses the check.
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
        bucket = lax.psum(jnp.concatenate([g1.ravel(), g2.ravel()]), "data")
        g1 = bucket[:g1.size].reshape(g1.shape)
        g2 = bucket[g1.size:g1.size + g2.size].reshape(g2.shape)
        return lax.psum(loss, "data"), g1, g2

    def step(params, opt_state, x, y):
        grads_fn = jax.shard_map(lambda a, b, c, d: local_grads(a, b, c, d, y.size), mesh=mesh,
                                 in_specs=(W1_SPEC, W2_SPEC, X_SPEC, X_SPEC), out_specs=(P(), W1_SPEC, W2_SPEC))
        loss, g1, g2 = grads_fn(params["w1"], params["w2"], x, y)
        updates, opt_state = tx.update({"w1": g1, "w2": g2}, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return jax.jit(step)
