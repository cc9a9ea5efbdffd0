"""States no sharding anywhere and leaves it to jit: gathers h so that the second matmul needs no
out_sharding, places the parameters replicated, and has no shard_map at all.

loses: tp_mlp_states_the_output_sharding: no matmul in tp_mlp contracts the hidden units
loses: tp_mlp_forward_communicates_once: w2 is split by columns
loses: shard_map_psums_partial_sums_once_over_model: there is no shard_map
loses: optimizer_state_carries_parameter_specs: params['w1'] is P()
technique: none (every number right, the technique not doing the work)
"""
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding, PartitionSpec as P, reshard


def tp_mlp(w1, w2, x):
    return reshard(jax.nn.relu(x @ w1), P("data", None)) @ w2


def make_tp_mlp_shard_map(mesh):
    return tp_mlp


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
