"""Right: object style. A TPModel class holds the mesh and the optimizer; its train step is a method
jitted with @functools.partial(jax.jit, static_argnums=0) (self static) and make_tp_train_step
returns the bound method. The weights are stored transposed inside the model's matmuls:
lax.dot_general with explicit dimension numbers (w1 contracted on dim 0, the second matmul with
out_sharding), the shard_map body computes (w2_blk^T @ h^T)^T before its psum,. Should get 22/22.
(found by the red team of issue 31's judge)
"""
import functools

import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

W1, W2, ROWS = P(None, "model"), P("model", None), P("data", None)


def tp_mlp(w1, w2, x):
    h = jax.nn.relu(lax.dot_general(x, w1, (((1,), (0,)), ((), ()))))
    return lax.dot_general(h, w2, (((1,), (0,)), ((), ())), out_sharding=ROWS)


def _body(w1_blk, w2_blk, x_blk):
    h_t = jax.nn.relu(w1_blk.T @ x_blk.T)         # (H/model, B/data)
    return lax.psum((w2_blk.T @ h_t).T, "model")  # psum of (B/data, D)


def make_tp_mlp_shard_map(mesh):
    return jax.shard_map(_body, mesh=mesh, in_specs=(W1, W2, ROWS), out_specs=ROWS)


class TPModel:
    def __init__(self, mesh, tx):
        self.mesh, self.tx = mesh, tx

    def place(self, params):
        return {"w1": jax.device_put(params["w1"], NamedSharding(self.mesh, W1)),
                "w2": jax.device_put(params["w2"], NamedSharding(self.mesh, W2))}

    @staticmethod
    def loss(params, x, y):
        return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)

    @functools.partial(jax.jit, static_argnums=0)
    def train_step(self, params, opt_state, x, y):
        loss, grads = jax.value_and_grad(self.loss)(params, x, y)
        updates, opt_state = self.tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss


def init_tp_state(mesh, tx, params):
    placed = TPModel(mesh, tx).place(params)
    return placed, tx.init(placed)


def make_tp_train_step(mesh, tx):
    return TPModel(mesh, tx).train_step
