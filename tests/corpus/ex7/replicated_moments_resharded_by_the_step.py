"""Wrong: init_tp_state places the parameters right and builds the optimizer state from the
host arrays (replicated moments); the step reshards the state it gets onto the parameters'
specs, so training is right and only the state init_tp_state returns is misplaced. (found by the red team of issue 31's judge)

loses: optimizer_state_carries_parameter_specs: expected P(None, 'model')
"""
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding, reshard
from jax.sharding import PartitionSpec as P

W1_SPEC, W2_SPEC, X_SPEC = P(None, "model"), P("model", None), P("data", None)
PARAM_SPECS = {"w1": W1_SPEC, "w2": W2_SPEC}


def tp_mlp(w1, w2, x):
    return jnp.matmul(jax.nn.relu(x @ w1), w2, out_sharding=X_SPEC)


def _local(w1, w2, x):
    return lax.psum(jax.nn.relu(x @ w1) @ w2, "model")


def make_tp_mlp_shard_map(mesh):
    return jax.shard_map(_local, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC)


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    return placed, tx.init({k: jnp.asarray(v) for k, v in params.items()})  # replicated moments


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        opt_state = optax.tree_utils.tree_map_params(
            tx, lambda s, p: reshard(s, p.aval.sharding.spec) if hasattr(s, "ndim") and s.ndim == 2 else s,
            opt_state, params, transform_non_params=lambda s: s)
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss
    return step
