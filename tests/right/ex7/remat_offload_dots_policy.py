"""Right: the reference's loss under jax.checkpoint with the offloading policy
jax.checkpoint_policies.offload_dot_with_no_batch_dims(offload_src="device",
offload_dst="pinned_host"): the results of both matmuls (dots without batch dims) are moved to host
memory in the forward and back for the backward, nothing else saved. Offloading moves memory, not
work: the step trains and communicates as the reference does. Another offloading policy than
tests/right/ex7/remat_offload_policy.py's (names), chosen by the operation, not by a name.

Full marks: 22/22 with and without --sandbox at seeds 20261130, 7 and 0.
"""
import functools
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


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    return placed, tx.init(placed)


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


_POLICY = jax.checkpoint_policies.offload_dot_with_no_batch_dims(offload_src="device", offload_dst="pinned_host")


def make_tp_train_step(mesh, tx):
    loss_fn = jax.checkpoint(_loss, policy=_POLICY)

    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
