"""RIGHT: init_tp_state runs tx.init on the NumPy parameters themselves (a host state), then places
parameters and state in one jax.device_put of a pytree of shardings: optax.tree_map_params pairs each
moment (momentum SGD's trace, Adam's mu and nu) with its parameter's NamedSharding, and
transform_non_params replicates the rest (Adam's count).

22/22 at --seed 20261130, 7 and 276678, with and without --sandbox (red team, 2026-12-07).
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
PARAM_SPECS = {"w1": W1_SPEC, "w2": W2_SPEC}


def tp_mlp(w1, w2, x):
    h = jax.nn.relu(x @ w1)
    return jnp.matmul(h, w2, out_sharding=X_SPEC)


def _tp_mlp_local(w1_blk, w2_blk, x_blk):
    return lax.psum(jax.nn.relu(x_blk @ w1_blk) @ w2_blk, "model")


def make_tp_mlp_shard_map(mesh):
    return jax.shard_map(_tp_mlp_local, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC)


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


def init_tp_state(mesh, tx, params):
    """The state made on the host from the NumPy params, then every array put where it belongs in
    one jax.device_put of a pytree of shardings: each moment takes its parameter's sharding
    (optax.tree_map_params pairs them), anything else (Adam's count) is replicated."""
    shardings = {k: NamedSharding(mesh, spec) for k, spec in PARAM_SPECS.items()}
    state = tx.init(params)
    state_shardings = optax.tree_map_params(
        tx, lambda _, s: s, state, shardings,
        transform_non_params=lambda _: NamedSharding(mesh, P()))
    return jax.device_put((params, state), (shardings, state_shardings))


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
