"""RIGHT: init_tp_state waits for each placement with
jax.device_put(...).block_until_ready() (as benchmarking code does), then tx.init of the placed
params. Also spelled short (P("data"), P("model"), a shard_map decorator, jnp.dot with
out_sharding), which tests/right or tests/corpus (red-team control) short_specs_decorator_dot.py shows earns full marks alone.
Should get 22/22.

Scores (--seed 276678, main mesh (2, 4)): without --sandbox 20/22, with --sandbox 20/22; verbose
output identical in both modes. Expected: 22/22.

Since init_tp_state is traced with the no-ops skipped: 22/22 at seed 276678, with and
without --sandbox.
"""
import functools

import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

SPECS = {"w1": P(None, "model"), "w2": P("model")}


def tp_mlp(w1, w2, x):
    return jnp.dot(jax.nn.relu(jnp.dot(x, w1)), w2, out_sharding=P("data"))


def make_tp_mlp_shard_map(mesh):
    @functools.partial(jax.shard_map, mesh=mesh, in_specs=(SPECS["w1"], SPECS["w2"], P("data")), out_specs=P("data"))
    def f(w1, w2, x):
        return lax.psum(jax.nn.relu(x @ w1) @ w2, axis_name="model")
    return f


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, SPECS[k])).block_until_ready() for k, v in params.items()}
    return placed, tx.init(placed)


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(lambda p: jnp.mean((tp_mlp(p["w1"], p["w2"], x) - y) ** 2))(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss
    return step
