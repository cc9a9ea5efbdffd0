"""Right: einsum spellings of both matmuls, the shard_map built with a decorator inside the
factory, the parameters placed in one device_put of a dict of shardings, and the step jitted by
a decorator that donates its params and state."""
import functools

import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def tp_mlp(w1, w2, x):
    h = jax.nn.relu(jnp.einsum("bd,dh->bh", x, w1))
    return jnp.einsum("bh,hd->bd", h, w2, out_sharding=P("data", None))


def make_tp_mlp_shard_map(mesh):
    @functools.partial(jax.shard_map, mesh=mesh, in_specs=(P(None, "model"), P("model", None), P("data", None)),
                       out_specs=P("data", None))
    def f(w1_blk, w2_blk, x_blk):
        h = jax.nn.relu(jnp.einsum("bd,dh->bh", x_blk, w1_blk))
        return lax.psum(jnp.einsum("bh,hd->bd", h, w2_blk), "model")

    return f


def init_tp_state(mesh, tx, params):
    shardings = {"w1": NamedSharding(mesh, P(None, "model")), "w2": NamedSharding(mesh, P("model", None))}
    placed = jax.device_put(dict(params), shardings)
    return placed, tx.init(placed)


def make_tp_train_step(mesh, tx):
    def loss_fn(params, x, y):
        return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
