"""Right: the whole training step's gradient written per device in one shard_map: each device
differentiates its own share of the loss (its rows, its hidden units; shard_map adds the
weights' gradients over "data" itself) and the loss is added over "data" with psum; the forward's
partial sums are added over "model" by one psum.
The update runs in the global view under jax.jit with explicit out_shardings."""
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

W1, W2, X = P(None, "model"), P("model", None), P("data", None)


def _local_mlp(w1_blk, w2_blk, x_blk):
    return lax.psum(jax.nn.relu(x_blk @ w1_blk) @ w2_blk, "model")


def tp_mlp(w1, w2, x):
    return jnp.matmul(jax.nn.relu(x @ w1), w2, out_sharding=X)


def make_tp_mlp_shard_map(mesh):
    return jax.shard_map(_local_mlp, mesh=mesh, in_specs=(W1, W2, X), out_specs=X)


def init_tp_state(mesh, tx, params):
    placed = {"w1": jax.device_put(params["w1"], NamedSharding(mesh, W1)),
              "w2": jax.device_put(params["w2"], NamedSharding(mesh, W2))}
    return placed, tx.init(placed)


def make_tp_train_step(mesh, tx):
    def local_grads(w1_blk, w2_blk, x_blk, y_blk, n):
        def local_loss(w1_blk, w2_blk):
            err = _local_mlp(w1_blk, w2_blk, x_blk) - y_blk
            return jnp.sum(err ** 2) / n  # this device's rows' share of the global mean

        loss, (g1, g2) = jax.value_and_grad(local_loss, argnums=(0, 1))(w1_blk, w2_blk)
        # With shard_map's default check_vma=True, g1 and g2 come back already added over "data" (the
        # transpose of using the "data"-invariant weights on varying rows); only the loss needs a psum.
        return lax.psum(loss, "data"), g1, g2

    def step(params, opt_state, x, y):
        grads_fn = jax.shard_map(lambda a, b, c, d: local_grads(a, b, c, d, y.size), mesh=mesh,
                                 in_specs=(W1, W2, X, X), out_specs=(P(), W1, W2))
        loss, g1, g2 = grads_fn(params["w1"], params["w2"], x, y)
        updates, opt_state = tx.update({"w1": g1, "w2": g2}, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    shardings = {"w1": NamedSharding(mesh, W1), "w2": NamedSharding(mesh, W2)}
    return jax.jit(step, out_shardings=(shardings, None, NamedSharding(mesh, P())))
