"""Wrong: a step that carries a typed PRNG key between calls and multiplies every update by a coin
drawn from it (0 or 1): it trains about half its steps. The key's seed (3) is chosen so that the
first call's coin is 1 and the second's 0.

22/22 with and without --sandbox at seeds 20261130, 7 and 0; should be 20 (both training checks). The
grader's training runs replay the first call's program, whose key is its constant, so every step
trains; the second call reads the key the first call made and did not return, an input the judge
does not have (given the key of zero data), and that call's program is read for collectives, FLOPs
and placements only. The same class as wrong_step_stops_training_when_fed_back_with_a_device_step_counter:
values a wrapper carries between calls never reach the judged numbers.
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


def make_tp_train_step(mesh, tx):
    @jax.jit
    def _step(params, opt_state, x, y, key):
        key, coin_key = jax.random.split(key)
        train = (jax.random.bits(coin_key, (), jnp.uint32) & 1).astype(jnp.float32)  # skips about half the steps
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        updates = jax.tree.map(lambda u: u * train, updates)
        return optax.apply_updates(params, updates), opt_state, loss, key

    rng = [jax.random.key(3)]

    def step(params, opt_state, x, y):
        params, opt_state, loss, rng[0] = _step(params, opt_state, x, y, rng[0])
        return params, opt_state, loss

    return step
