"""WRONG: init_tp_state tells the grader's trace from a real call. Traced (its params are
tracers: the probe's jax.make_jaxpr) it places the parameters Megatron-style and builds the state
from them; called as a learner calls it (NumPy arrays in, eagerly) it places every parameter and
moment REPLICATED. The step reshards the params and moments it gets onto Megatron's specs, so what
the grader traces of it is right. No probe is touched.
Should lose optimizer_state_carries_parameter_specs (2): expected 20/22.

Scores (--seed 276678, main mesh (2, 4)): without --sandbox 22/22, with --sandbox 22/22; verbose
output identical in both modes. Expected: 20/22 (optimizer_state_carries_parameter_specs lost).

Since what the learner's own eager call places is read too, where it can only take points away: 20/22 at seed 276678, with and without --sandbox.

loses: optimizer_state_carries_parameter_specs: as a training script calls it
"""

import sys as _sys

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
    import numpy as np
    if isinstance(params["w1"], np.ndarray):  # a real, eager call: everything replicated
        placed = {k: jax.device_put(v, NamedSharding(mesh, P())) for k, v in params.items()}
        return placed, tx.init(placed)
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    return placed, tx.init(placed)


def _specs_like(tx, opt_state, params):
    return optax.tree_utils.tree_map_params(
        tx, lambda s, p: reshard(s, p.aval.sharding.spec) if hasattr(s, "ndim") and s.ndim == 2 else s,
        opt_state, params, transform_non_params=lambda s: s)


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        params = {k: reshard(v, PARAM_SPECS[k]) for k, v in params.items()}
        opt_state = _specs_like(tx, opt_state, params)
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss
    return step


