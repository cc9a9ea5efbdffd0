"""WRONG: the step gathers Adam's moments. Before tx.update it reshards every moment of an Adam
state (one holding `nu`) to P() (all-gathers: every device then holds and updates every moment
whole) and puts the new moments back on their parameters' specs at the end; a momentum-SGD state
is left split. The grader compiles the SGD step only (training_step_communicates_like_megatron,
each_device_does_its_share_of_the_work); the Adam step is checked for numbers and for where its
outputs land. Should lose training_step_communicates_like_megatron (2): expected 20/22.

Scores (--seed 276678, main mesh (2, 4)): without --sandbox 22/22, with --sandbox 22/22; verbose
output identical in both modes. Expected: 20/22 (training_step_communicates_like_megatron lost).

loses: training_step_communicates_like_megatron: the compiled Adam training step

Since the Adam step's collectives are read too: 20/22 at seeds 276678 and 2, with and
without --sandbox.
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
    return placed, tx.init(placed)


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


def _is_adam(opt_state):
    return any(isinstance(s, optax.ScaleByAdamState) for s in jax.tree.leaves(
        opt_state, is_leaf=lambda s: isinstance(s, optax.ScaleByAdamState)))


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        adam = _is_adam(opt_state)
        if adam:
            opt_state = jax.tree.map(lambda s: reshard(s, P()), opt_state)
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        if adam:
            grads = {k: reshard(g, P()) for k, g in grads.items()}
        updates, opt_state = tx.update(grads, opt_state, {k: reshard(v, P()) for k, v in params.items()} if adam else params)
        if adam:
            updates = {k: reshard(u, PARAM_SPECS[k]) for k, u in updates.items()}
            opt_state = optax.tree_utils.tree_map_params(
                tx, lambda s, p: reshard(s, jax.typeof(p).sharding.spec) if jnp.ndim(s) == 2 else s,
                opt_state, params, transform_non_params=lambda s: s)
        return optax.apply_updates(params, updates), opt_state, loss
    return step
