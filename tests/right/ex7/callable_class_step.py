"""Right: the step is an instance of a class whose __call__ calls a jitted method (so the step
itself has no .lower) and places the new params where they already are; tp_mlp states the
output's sharding as x's own (jax.typeof(x).sharding); the parameters are placed with
jax.tree.map over a tree of specs."""
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def tp_mlp(w1, w2, x):
    h = jax.nn.relu(x @ w1)
    return jnp.matmul(h, w2, out_sharding=jax.typeof(x).sharding)


def make_tp_mlp_shard_map(mesh):
    def body(w1_blk, w2_blk, x_blk):
        partial = jax.nn.relu(x_blk @ w1_blk) @ w2_blk
        return lax.psum(partial, "model")

    return jax.shard_map(body, mesh=mesh, in_specs=(P(None, "model"), P("model", None), P("data", None)),
                         out_specs=P("data", None))


def init_tp_state(mesh, tx, params):
    specs = {"w1": P(None, "model"), "w2": P("model", None)}
    placed = jax.tree.map(lambda a, s: jax.device_put(a, NamedSharding(mesh, s)), dict(params), specs)
    return placed, tx.init(placed)


class _Step:
    def __init__(self, mesh, tx):
        self.tx = tx
        self.shardings = {"w1": NamedSharding(mesh, P(None, "model")), "w2": NamedSharding(mesh, P("model", None))}
        self._jitted = jax.jit(self._step)

    def _loss(self, params, x, y):
        return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)

    def _step(self, params, opt_state, x, y):
        loss, grads = jax.value_and_grad(self._loss)(params, x, y)
        updates, opt_state = self.tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def __call__(self, params, opt_state, x, y):
        params, opt_state, loss = self._jitted(params, opt_state, x, y)
        return jax.device_put(params, self.shardings), opt_state, loss  # where they already are


def make_tp_train_step(mesh, tx):
    return _Step(mesh, tx)
