"""RIGHT: the reference's step in a callable class that draws each step's key from a base key
folded with the step count (jax.random.fold_in(base, count) inside the jitted step, the count a
Python int passed in, so step t has the same key at any restart), splits it and keeps the sampling
key for the caller. No value of the step depends on the key.

Full marks (22/22 with and without --sandbox at seeds 20261130, 7 and 0): the base key is an input
of the jit, a constant of the traced call sent as its uint32 data and its implementation's name,
and random_fold_in and random_split are read like any other operation. Was 13/22: the program
encoding refused a value of dtype key<fry>.
"""
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

W1_SPEC = P(None, "model")
W2_SPEC = P("model", None)
X_SPEC = P("data", None)
H_SPEC = P("data", "model")  # the hidden activations: rows by data, hidden units by model
PARAM_SPECS = {"w1": W1_SPEC, "w2": W2_SPEC}


def tp_mlp(w1, w2, x):
    h = jax.nn.relu(x @ w1)
    return jnp.matmul(h, w2, out_sharding=X_SPEC)


def _tp_mlp_local(w1_blk, w2_blk, x_blk):
    return lax.psum(jax.nn.relu(x_blk @ w1_blk) @ w2_blk, "model")


def make_tp_mlp_shard_map(mesh):
    return jax.shard_map(_tp_mlp_local, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC)


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    return placed, tx.init(placed)




def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


class _Step:
    """A step that draws its key from a base key folded with the step count (the same key for step
    t at any restart), ready for dropout; the last key drawn is kept for the caller's sampling."""

    def __init__(self, tx):
        self.tx, self.base, self.count, self.last_key = tx, jax.random.key(1234), 0, None
        self._jitted = jax.jit(self._step)

    def _step(self, params, opt_state, x, y, base, count):
        key = jax.random.fold_in(base, count)
        key, sample_key = jax.random.split(key)
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = self.tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, sample_key

    def __call__(self, params, opt_state, x, y):
        params, opt_state, loss, self.last_key = self._jitted(params, opt_state, x, y, self.base, self.count)
        self.count += 1
        return params, opt_state, loss


def make_tp_train_step(mesh, tx):
    return _Step(tx)
