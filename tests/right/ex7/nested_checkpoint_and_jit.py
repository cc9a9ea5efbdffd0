"""Right: nested transforms. tp_mlp is itself jitted and checkpointed; the shard_map body keeps its
local MLP and its psum inside jax.checkpoint, and the factory returns the shard_map under jax.jit;
the step rematerializes the model."""
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


@jax.jit
@jax.checkpoint
def tp_mlp(w1, w2, x):
    h = jax.nn.relu(x @ w1)
    return jnp.matmul(h, w2, out_sharding=P("data", None))


@jax.checkpoint
def _local(w1_blk, w2_blk, x_blk):
    partial = jax.nn.relu(x_blk @ w1_blk) @ w2_blk
    return lax.psum(partial, "model")


def make_tp_mlp_shard_map(mesh):
    return jax.jit(jax.shard_map(_local, mesh=mesh, in_specs=(P(None, "model"), P("model", None), P("data", None)),
                                 out_specs=P("data", None)))


def init_tp_state(mesh, tx, params):
    placed = {"w1": jax.device_put(params["w1"], NamedSharding(mesh, P(None, "model"))),
              "w2": jax.device_put(params["w2"], NamedSharding(mesh, P("model", None)))}
    return placed, tx.init(placed)


def make_tp_train_step(mesh, tx):
    @jax.checkpoint
    def loss_fn(params, x, y):
        return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)

    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
