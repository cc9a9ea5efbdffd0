"""Wrong: a step that carries a typed PRNG key between calls (split each call, as
tests/right/ex7/step_threads_a_typed_prng_key does) and lets a coin drawn from it choose, by
lax.cond, between Megatron's loss and one computed from both weights resharded whole onto every
device. A key hides nothing: the key travels as data, and the compiled step holds both branches,
the gathered weights' collectives and work included.

18/22 with and without --sandbox at seeds 20261130, 7 and 0 (was 13/22: a key could not be sent).

loses: training_step_communicates_like_megatron: weight-sized arrays
loses: each_device_does_its_share_of_the_work: devices repeat each other's work
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


def _gathered_loss(params, x, y):
    w1 = jax.sharding.reshard(params["w1"], P())  # every weight whole on every device
    w2 = jax.sharding.reshard(params["w2"], P())
    out = jnp.matmul(jax.nn.relu(x @ w1), w2, out_sharding=X_SPEC)
    return jnp.mean((out - y) ** 2)


def make_tp_train_step(mesh, tx):
    @jax.jit
    def _step(params, opt_state, x, y, key):
        key, coin_key = jax.random.split(key)
        coin = jax.random.bits(coin_key, (), jnp.uint32) & 1
        loss, grads = lax.cond(coin == 0, jax.value_and_grad(_loss), jax.value_and_grad(_gathered_loss),
                               params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, key

    rng = [jax.random.key(0)]

    def step(params, opt_state, x, y):
        params, opt_state, loss, rng[0] = _step(params, opt_state, x, y, rng[0])
        return params, opt_state, loss

    return step
