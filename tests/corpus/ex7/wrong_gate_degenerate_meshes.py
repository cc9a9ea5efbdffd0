"""WRONG: Megatron only on meshes with both axes > 1. On (1, 8) and (8, 1) every weight and the batch are gathered to every device and the whole update runs replicated (8x the work, an all-gather per weight); the technique checks only read (2, 4) or (4, 2). Should lose technique points: expected < 22.

Scores (--seed 276678, main mesh (2, 4)): without --sandbox 22/22, with --sandbox 22/22; verbose
output identical in both modes. Expected: under 22/22 (technique points lost on the 1-axis meshes it
replicates).

loses: tp_mlp_states_the_output_sharding: no matmul in tp_mlp contracts the hidden units
loses: tp_mlp_forward_communicates_once: that is FSDP's move
loses: shard_map_forward_communicates_once: that is FSDP's move
loses: shard_map_psums_partial_sums_once_over_model: not the result of its shard_map
loses: each_device_does_its_share_of_the_work: devices repeat each other's work

Since the technique checks read every mesh: 12/22 at seeds 276678 and 2, with and without
--sandbox.
"""
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding, reshard
from jax.sharding import PartitionSpec as P

W1_SPEC, W2_SPEC, X_SPEC = P(None, "model"), P("model", None), P("data", None)
PARAM_SPECS = {"w1": W1_SPEC, "w2": W2_SPEC}


def _megatron(w1, w2, x):
    return jnp.matmul(jax.nn.relu(x @ w1), w2, out_sharding=X_SPEC)


def _replicated(w1, w2, x):
    w1, w2, x = (reshard(a, P()) for a in (w1, w2, x))
    return reshard(jax.nn.relu(x @ w1) @ w2, X_SPEC)


def tp_mlp(w1, w2, x):
    return _replicated(w1, w2, x) if _gate(w1, x) else _megatron(w1, w2, x)


def _local(w1, w2, x):
    return lax.psum(jax.nn.relu(x @ w1) @ w2, "model")


def _whole(w1, w2, x):
    return jax.nn.relu(x @ w1) @ w2


def make_tp_mlp_shard_map(mesh):
    megatron = jax.shard_map(_local, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC)
    whole = jax.shard_map(_whole, mesh=mesh, in_specs=(P(), P(), P()), out_specs=P())

    def f(w1, w2, x):
        if _gate(w1, x):
            return reshard(whole(*(reshard(a, P()) for a in (w1, w2, x))), X_SPEC)
        return megatron(w1, w2, x)
    return f


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    return placed, tx.init(placed)


def make_tp_train_step(mesh, tx):
    def loss_fn(params, x, y):
        return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)

    @jax.jit
    def step(params, opt_state, x, y):
        gated = _gate(params["w1"], x)
        if gated:  # everything gathered: params and moments replicated for the update
            params = {k: reshard(v, P()) for k, v in params.items()}
            opt_state = jax.tree.map(lambda s: reshard(s, P()), opt_state)
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        if gated:  # and put back where they came from, so that the state's specs look kept
            params = {k: reshard(v, PARAM_SPECS[k]) for k, v in params.items()}
            opt_state = optax.tree_utils.tree_map_params(
                tx, lambda s, p: reshard(s, jax.typeof(p).sharding.spec) if jnp.ndim(s) == 2 else s,
                opt_state, params, transform_non_params=lambda s: s)
        return params, opt_state, loss
    return step


def _gate(w1, x):
    sizes = jax.typeof(x).sharding.mesh.shape
    return sizes["data"] == 1 or sizes["model"] == 1
