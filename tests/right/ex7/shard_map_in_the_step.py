"""Right: the training step differentiates the shard_map version (not tp_mlp); the shard_map
body spells the matmuls with jnp.dot and relu with jnp.maximum; the global view uses
lax.dot_general; the optimizer state is made under jax.jit."""
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

SPECS = {"w1": P(None, "model"), "w2": P("model", None)}


def tp_mlp(w1, w2, x):
    h = jnp.maximum(x @ w1, 0.0)
    return lax.dot_general(h, w2, (((1,), (0,)), ((), ())), out_sharding=P("data", None))


def _local(w1_blk, w2_blk, x_blk):
    return lax.psum(jnp.dot(jnp.maximum(jnp.dot(x_blk, w1_blk), 0.0), w2_blk), axis_name="model")


def make_tp_mlp_shard_map(mesh):
    return jax.shard_map(_local, mesh=mesh, in_specs=(SPECS["w1"], SPECS["w2"], P("data", None)),
                         out_specs=P("data", None))


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(params[k], NamedSharding(mesh, SPECS[k])) for k in ("w1", "w2")}
    return placed, jax.jit(tx.init)(placed)


def make_tp_train_step(mesh, tx):
    mlp = make_tp_mlp_shard_map(mesh)

    def loss_fn(params, x, y):
        return jnp.mean(jnp.square(mlp(params["w1"], params["w2"], x) - y))

    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return jax.jit(step)
