"""WRONG: the optimizer state is replicated (tx.init of the host arrays: every device keeps every
moment whole), and the module swaps the __code__ of probes.placement (the worker's report of where
init_tp_state's eager run put the moments) for one that device_puts each moment onto its
parameter's spec before describing it. The judge's run of init_tp_state places the parameters
right and leaves the moments unsplit, so it falls back on the forged report
(checks.reported_moments). The step reshards the state it gets to the parameters' specs, so the
check's "after one training step" half passes honestly.
Should lose optimizer_state_carries_parameter_specs (2): expected 20/22.

Scores (--seed 276678, main mesh (2, 4)): without --sandbox 22/22, with --sandbox 22/22; verbose
output identical in both modes. Expected: 20/22 (optimizer_state_carries_parameter_specs lost).

Since the judge reads the report only where the program's types of the parameters lost their
placement: 20/22 with --sandbox, still 22/22 without it at seed 276678 (its swapped
probes.placement is also the one the judge calls in the shared process).
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


def _fake_placement(params, state, paths):
    def put(leaf, path):
        for k in PARAM_SPECS:
            if f"['{k}']" in str(path) and getattr(leaf, "ndim", 0) == 2:
                return jax.device_put(leaf, NamedSharding(leaf.sharding.mesh, PARAM_SPECS[k]))
        return leaf
    return {"params": {k: placed_as(params[k], 2) for k in PARAM_SPECS},
            "leaves": [{"path": str(path), "shape": tuple(int(d) for d in getattr(leaf, "shape", ())),
                        "placed": placed_as(put(leaf, path), getattr(leaf, "ndim", 0))}
                       for path, leaf in zip(paths, state)]}


_probes = _sys.modules.get("graders.exercises.ex7_megatron_tp.probes")
if _probes is not None:
    _probes.placement.__code__ = _fake_placement.__code__
