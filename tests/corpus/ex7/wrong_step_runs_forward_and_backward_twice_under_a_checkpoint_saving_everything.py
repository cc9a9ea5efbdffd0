"""WRONG: tests/corpus/ex7/wrong_step_runs_forward_and_backward_twice_under_remat.py with its hidden
layer under jax.checkpoint with policy jax.checkpoint_policies.everything_saveable: a checkpoint
that recomputes nothing, there only to earn a step under jax.checkpoint its allowance, beside a
second forward and backward behind lax.optimization_barrier whose loss and gradients are averaged
with the first's. The numbers are right; each device does twice its work.

A step under jax.checkpoint is held to RECOMPUTE_ALLOWANCE = 1.9 times the grader's own Megatron
step compiled on the same mesh (per device); this one does 85,795 FLOPs on (4, 2) at seed 20261130
where that step does 43,665 (1.96x; 1.96-2.07x at seeds 20261130, 7, 276678 and 0 on the meshes it
reached), right remat steps up to 1.75x (three nested levels of jax.checkpoint). Before that fix
(1.5 x twice a single-device share) 2.1x a plain share passed. 20/22 at seeds 20261130, 7 and 0,
with and without --sandbox, the same message.

loses: each_device_does_its_share_of_the_work: the step repeats work beyond what rematerialising recomputes
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


@functools.partial(jax.checkpoint, policy=jax.checkpoint_policies.everything_saveable)
def _hidden(w1_blk, x_blk):
    return jax.nn.relu(x_blk @ w1_blk)


def _local_loss(w1_blk, w2_blk, x_blk, y_blk, n):
    return jnp.sum((lax.psum(_hidden(w1_blk, x_blk) @ w2_blk, "model") - y_blk) ** 2) / n


def make_tp_train_step(mesh, tx):
    def local_grads(w1_blk, w2_blk, x_blk, y_blk, n):
        a, b = (lax.pcast(w, ("data",), to="varying") for w in (w1_blk, w2_blk))
        l1, (d1, e1) = jax.value_and_grad(_local_loss, argnums=(0, 1))(a, b, x_blk, y_blk, n)
        a2, b2, x2, y2 = lax.optimization_barrier((a, b, x_blk, y_blk))  # a second pass, not shared
        l2, (d2, e2) = jax.value_and_grad(_local_loss, argnums=(0, 1))(a2, b2, x2, y2, n)
        return (lax.psum((l1 + l2) / 2, "data"), lax.psum((d1 + d2) / 2, "data"),
                lax.psum((e1 + e2) / 2, "data"))

    def step(params, opt_state, x, y):
        grads_fn = jax.shard_map(lambda a, b, c, d: local_grads(a, b, c, d, y.size), mesh=mesh,
                                 in_specs=(W1_SPEC, W2_SPEC, X_SPEC, X_SPEC), out_specs=(P(), W1_SPEC, W2_SPEC))
        loss, g1, g2 = grads_fn(params["w1"], params["w2"], x, y)
        updates, opt_state = tx.update({"w1": g1, "w2": g2}, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return jax.jit(step)
