"""Exercise 7 without the technique: every number right, every weight and the batch replicated on
every device (tests/corpus/ex7/everything_replicated.py). Graded honestly it earns the numeric
checks and what a replicated program happens to pass."""
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding, PartitionSpec as P, reshard


def tp_mlp(w1, w2, x):
    w1, w2, x = (reshard(a, P()) for a in (w1, w2, x))
    return reshard(jax.nn.relu(x @ w1) @ w2, P("data", None))


def make_tp_mlp_shard_map(mesh):
    def whole(w1, w2, x):
        return jnp.asarray(jax.nn.relu(x @ w1) @ w2)

    body = jax.shard_map(whole, mesh=mesh, in_specs=(P(), P(), P()), out_specs=P())
    return lambda w1, w2, x: reshard(body(*(reshard(a, P()) for a in (w1, w2, x))), P("data", None))


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, P())) for k, v in params.items()}
    return placed, tx.init(placed)


def make_tp_train_step(mesh, tx):
    def loss(params, x, y):
        return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)

    @jax.jit
    def step(params, opt_state, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return step
