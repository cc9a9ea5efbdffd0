"""Wrong: a step that gathers both weights' updates whole onto every device of the "model" axis
before applying them (tests/corpus/ex7/step_gathers_updates), hidden in a branch of lax.cond:
inside a shard_map, the branch taken whenever the loss is finite (always) all-gathers both
updates over "model", clips them by their whole norm and keeps its own blocks again; the other
branch returns the blocks as they are.

A conditional's branches are each read as run as often as the conditional (hlo.collective_groups
walks branch_computations): the all-gathers of (D, H) and (H, D) are weights gathered whole.
20/22 in both modes at seeds 20261130 and 7, 20/22 at seed 276678.

loses: training_step_communicates_like_megatron: weight-sized arrays
"""
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

W1_SPEC = P(None, "model")  # column split: each device owns H/model hidden units
W2_SPEC = P("model", None)  # row split: the same hidden units' rows of w2
X_SPEC = P("data", None)    # the batch split over "data"; also the output's spec
PARAM_SPECS = {"w1": W1_SPEC, "w2": W2_SPEC}


def tp_mlp(w1, w2, x):
    h = jax.nn.relu(x @ w1)  # column parallel: each device's own hidden units
    return jnp.matmul(h, w2, out_sharding=X_SPEC)  # row parallel: one all-reduce over "model"


def _tp_mlp_local(w1_blk, w2_blk, x_blk):
    return lax.psum(jax.nn.relu(x_blk @ w1_blk) @ w2_blk, "model")


def make_tp_mlp_shard_map(mesh):
    return jax.shard_map(_tp_mlp_local, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC)


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    return placed, tx.init(placed)


def _clipped(u1, u2, loss):
    """Both updates clipped by their whole norm, gathered whole onto every device of "model" inside
    a lax.cond branch (taken whenever the loss is finite, i.e. always)."""
    me, k = lax.axis_index("model"), u1.shape[1]

    def gather_and_clip(u1, u2):
        w1_all = lax.all_gather(u1, "model", axis=1, tiled=True)
        w2_all = lax.all_gather(u2, "model", axis=0, tiled=True)
        scale = jnp.minimum(1.0, 1e6 / jnp.sqrt(jnp.sum(w1_all ** 2) + jnp.sum(w2_all ** 2)))
        return (lax.dynamic_slice_in_dim(w1_all * scale, me * k, k, 1),
                lax.dynamic_slice_in_dim(w2_all * scale, me * k, k, 0))

    return lax.cond(jnp.isfinite(loss), gather_and_clip, lambda a, b: (a, b), u1, u2)


def make_tp_train_step(mesh, tx):
    clip = jax.shard_map(_clipped, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, P()), out_specs=(W1_SPEC, W2_SPEC),
                         check_vma=False)

    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        u1, u2 = clip(updates["w1"], updates["w2"], loss)
        return optax.apply_updates(params, {"w1": u1, "w2": u2}), opt_state, loss

    return step
