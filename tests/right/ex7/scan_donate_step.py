"""Right: the step is jax.jit(..., donate_argnums=(0, 1)) (params and state buffers reused) and runs
its update inside lax.scan over a one-element loop of inner steps (a multi-step trainer with
n_inner=1), the carry being (params, opt_state); the loss comes back as the scan's stacked output.
Should get 22/22. (found by the red team of issue 31's judge)
"""
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

SPECS = {"w1": P(None, "model"), "w2": P("model", None)}
ROWS = P("data", None)
N_INNER = 1


def tp_mlp(w1, w2, x):
    return jnp.matmul(jax.nn.relu(x @ w1), w2, out_sharding=ROWS)


def make_tp_mlp_shard_map(mesh):
    def body(a, b, c):
        return lax.psum(jax.nn.relu(c @ a) @ b, "model")
    return jax.shard_map(body, mesh=mesh, in_specs=(SPECS["w1"], SPECS["w2"], ROWS), out_specs=ROWS)


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(params[k], NamedSharding(mesh, SPECS[k])) for k in SPECS}
    return placed, tx.init(placed)


def make_tp_train_step(mesh, tx):
    def loss_fn(params, x, y):
        return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)

    def inner(carry, _):
        params, opt_state, x, y = carry
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state, x, y), loss

    def step(params, opt_state, x, y):
        (params, opt_state, _, _), losses = lax.scan(inner, (params, opt_state, x, y), None, length=N_INNER)
        return params, opt_state, losses[-1]

    return jax.jit(step, donate_argnums=(0, 1))
