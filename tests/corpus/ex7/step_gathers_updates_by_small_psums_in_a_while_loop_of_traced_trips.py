"""A step that gathers both weights' updates whole onto every device of the "model" axis
before applying them (tests/corpus/ex7/step_gathers_updates), by psums of D numbers each, in a
lax.while_loop whose trip count is a traced value (the number of columns, or 0 where the update
holds a NaN): each device lays its update block at its place in a zero buffer of the whole update,
and each trip adds one column of D numbers over "model"; the whole update is clipped by its own
norm and each device keeps its block again. Every device receives model times the update it needs.
It is tests/corpus/ex7/gathers_updates_by_psums_of_d_numbers with the fori_loop written as a
while_loop of traced trips.

training_step_communicates_like_megatron counts a loop whose trips XLA does not know as run once,
and a (D,) all-reduce is a "small" one (the loss reduced in another order), free up to
2 * max(B, D) numbers over an axis: each loop's psum counts D numbers once. At seed 20261130 on
(4, 2) (D=16, H=40, B=48) the two loops are read as 32 numbers over "model" (under the allowance
of 96) where they sum 2 * 40 * 16 = 1,280.

A while loop whose trip count XLA does not know runs as many trips as it needs to fill what it
carries (hlo.loop_trips), for the collectives and the FLOPs alike; small all-reduces are the loss
only up to 2 * max(B, D) numbers. Scores in both modes at seeds 20261130, 7 and 276678: 20/22 (22/22 before).

loses: training_step_communicates_like_megatron: over 'model'
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


def _whole_by_small_psums(blk):
    """blk (D, cols/model) gathered over "model" into the whole (D, cols), D numbers a psum."""
    me, n = lax.axis_index("model"), lax.axis_size("model")
    d, k = blk.shape
    buf = lax.dynamic_update_slice_in_dim(jnp.zeros((d, k * n), blk.dtype), blk, me * k, 1)
    pieces = buf.T  # (cols, D): one piece of D numbers a row

    n = jnp.where(jnp.isnan(blk[0, 0]), 0, pieces.shape[0])  # the trip count, traced

    def body(carry):
        i, out = carry
        return i + 1, lax.dynamic_update_index_in_dim(out, lax.psum(pieces[i], "model"), i, 0)

    return lax.while_loop(lambda c: c[0] < n, body, (0, jnp.zeros_like(pieces)))[1].T


def _clipped_own_blocks(u1, u2t):
    w1_all, w2t_all = _whole_by_small_psums(u1), _whole_by_small_psums(u2t)
    scale = jnp.minimum(1.0, 1e6 / jnp.sqrt(jnp.sum(w1_all ** 2) + jnp.sum(w2t_all ** 2)))
    me, k = lax.axis_index("model"), u1.shape[1]
    return (lax.dynamic_slice_in_dim(w1_all * scale, me * k, k, 1),
            lax.dynamic_slice_in_dim(w2t_all * scale, me * k, k, 1).T)


def make_tp_train_step(mesh, tx):
    clip = jax.shard_map(lambda u1, u2: _clipped_own_blocks(u1, u2.T), mesh=mesh, in_specs=(W1_SPEC, W2_SPEC),
                         out_specs=(W1_SPEC, W2_SPEC), check_vma=False)

    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        u1, u2 = clip(updates["w1"], updates["w2"])
        return optax.apply_updates(params, {"w1": u1, "w2": u2}), opt_state, loss

    return step
