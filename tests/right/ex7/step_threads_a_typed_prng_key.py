"""RIGHT: the reference's step with an RNG key threaded through it, as a training loop that will add
dropout carries one: a wrapper holds a typed key (jax.random.key(0)) between calls and the jitted
step takes it, splits it and returns the new key. No value of the step depends on the key; its
params, state, losses and collectives are the reference's.

Full marks (22/22 with and without --sandbox at seeds 20261130, 7 and 0): threading a key is
ordinary training code. The first call's program holds the key as a constant, sent as its uint32
data and its implementation's name (threefry2x32) and rebuilt by the judge with
jax.random.wrap_key_data; its random_split is read like any other operation. The second call reads
the key the first call made and did not return: an input of its own, given the key of zero data.
Was 13/22: the program encoding refused a value of dtype key<fry>, so every step check failed.
"""
import functools
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

W1_SPEC = P(None, "model")
W2_SPEC = P("model", None)
X_SPEC = P("data", None)
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


def make_tp_train_step(mesh, tx):
    @jax.jit
    def _step(params, opt_state, x, y, key):
        key, _ = jax.random.split(key)  # a fresh key each step (what dropout would draw from)
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, key

    rng = [jax.random.key(0)]

    def step(params, opt_state, x, y):
        params, opt_state, loss, rng[0] = _step(params, opt_state, x, y, rng[0])
        return params, opt_state, loss

    return step
