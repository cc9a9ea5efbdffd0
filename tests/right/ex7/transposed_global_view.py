"""Right: the global view computed transposed, y = (w2.T @ h.T).T, with the sum stated where it
lives in that layout, P(None, "data"); the shard_map body built by a closure over the mesh's
specs; the step a closure over a loss that sums and divides by the element count."""
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def tp_mlp(w1, w2, x):
    h_t = jax.nn.relu(jnp.matmul(w1.T, x.T))  # (H@model, B@data)
    return jnp.matmul(w2.T, h_t, out_sharding=P(None, "data")).T


def make_tp_mlp_shard_map(mesh):
    specs = (P(None, "model"), P("model", None), P("data", None))

    def body(*blocks):
        w1_blk, w2_blk, x_blk = blocks
        return lax.psum(jax.nn.relu(x_blk @ w1_blk) @ w2_blk, "model")

    return jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=specs[2])


def init_tp_state(mesh, tx, params):
    placed = {name: jax.device_put(value, NamedSharding(mesh, spec))
              for (name, value), spec in zip(sorted(params.items()), (P(None, "model"), P("model", None)))}
    return placed, tx.init(placed)


def make_tp_train_step(mesh, tx):
    def loss_fn(params, x, y):
        err = tp_mlp(params["w1"], params["w2"], x) - y
        return jnp.sum(err * err) / (err.shape[0] * err.shape[1])

    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return jax.jit(step)
