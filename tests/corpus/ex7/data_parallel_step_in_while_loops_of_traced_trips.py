"""tp_mlp and the shard_map version are Megatron's, but the training step is plain data
parallelism with whole weights on every device: inside a shard_map each device gathers both
weights whole over "model" (psums of D numbers, one column a trip, in lax.while_loops whose trip
count is a traced value), then runs the whole MLP (every hidden unit) forward and backward on its
own rows, by hand, block of H/model hidden units by block, in two more while loops of traced trips
(model trips each); it keeps its own blocks of the gradients and sums them over "data". No
partial sums are added over "model": each device does model times Megatron's matmul work.

Both technique checks of the step read a while loop whose trips XLA does not know as run once:
training_step_communicates_like_megatron sees each gathering loop's (D,) psum once (a small
all-reduce, free as the loss), and each_device_does_its_share_of_the_work (XLA's cost analysis
plus hlo.uncounted_loop_flops, which adds only trips XLA knows) sees one block's matmuls: 1.28x a
share on (4, 2), 1.33x on (1, 8) at seed 20261130, where the device does model times a share.

A while loop whose trip count XLA does not know runs as many trips as it needs to fill what it
carries (hlo.loop_trips), for the collectives and the FLOPs alike; small all-reduces are the loss
only up to 2 * max(B, D) numbers. Scores in both modes at seeds 20261130, 7 and 276678: 18/22 (22/22 before).

loses: training_step_communicates_like_megatron: over 'model'
loses: each_device_does_its_share_of_the_work: devices repeat each other's work
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


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    return placed, tx.init(placed)


def _whole_by_small_psums(blk):
    """blk (D, cols/model) gathered over "model" into the whole (D, cols): one psum of D numbers a
    column, in a while loop whose trip count is a traced value (XLA does not know it)."""
    me, n_dev = lax.axis_index("model"), lax.axis_size("model")
    d, k = blk.shape
    pieces = lax.dynamic_update_slice_in_dim(jnp.zeros((d, k * n_dev), blk.dtype), blk, me * k, 1).T
    trips = jnp.where(jnp.isnan(blk[0, 0]), 0, pieces.shape[0])

    def body(carry):
        i, out = carry
        return i + 1, lax.dynamic_update_index_in_dim(out, lax.psum(pieces[i], "model"), i, 0)

    return lax.while_loop(lambda c: c[0] < trips, body, (0, jnp.zeros_like(pieces)))[1].T


def _local_step(w1_blk, w2_blk, x_blk, y_blk, n):
    # Every device gathers both weights whole and runs the whole MLP on its own rows (plain data
    # parallelism, no partial sums to add), block of hidden units by block of hidden units, in while
    # loops whose trip count (model) is a traced value.
    w1, w2t = _whole_by_small_psums(w1_blk), _whole_by_small_psums(w2_blk.T)
    k = w1_blk.shape[1]
    trips = jnp.where(jnp.isnan(w1_blk[0, 0]), 0, w1.shape[1] // k)

    def forward(carry):
        j, out = carry
        a, b = lax.dynamic_slice_in_dim(w1, j * k, k, 1), lax.dynamic_slice_in_dim(w2t, j * k, k, 1)
        return j + 1, out + jax.nn.relu(x_blk @ a) @ b.T

    pred = lax.while_loop(lambda c: c[0] < trips, forward, (0, jnp.zeros_like(y_blk)))[1]
    err = 2.0 * (pred - y_blk) / n

    def backward(carry):
        j, g1, g2t = carry
        a, b = lax.dynamic_slice_in_dim(w1, j * k, k, 1), lax.dynamic_slice_in_dim(w2t, j * k, k, 1)
        pre = x_blk @ a
        h = jax.nn.relu(pre)
        dh = (err @ b) * (pre > 0)
        return (j + 1, lax.dynamic_update_slice_in_dim(g1, x_blk.T @ dh, j * k, 1),
                lax.dynamic_update_slice_in_dim(g2t, err.T @ h, j * k, 1))

    _, g1, g2t = lax.while_loop(lambda c: c[0] < trips, backward, (0, jnp.zeros_like(w1), jnp.zeros_like(w2t)))
    me = lax.axis_index("model")
    g1_blk = lax.dynamic_slice_in_dim(g1, me * k, k, 1)
    g2_blk = lax.dynamic_slice_in_dim(g2t, me * k, k, 1).T
    loss = jnp.sum((pred - y_blk) ** 2) / n
    return lax.psum(loss, "data"), lax.psum(g1_blk, "data"), lax.psum(g2_blk, "data")


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        grads_fn = jax.shard_map(lambda a, b, c, d: _local_step(a, b, c, d, y.size), mesh=mesh,
                                 in_specs=(W1_SPEC, W2_SPEC, X_SPEC, X_SPEC), out_specs=(P(), W1_SPEC, W2_SPEC),
                                 check_vma=False)
        loss, g1, g2 = grads_fn(params["w1"], params["w2"], x, y)
        updates, opt_state = tx.update({"w1": g1, "w2": g2}, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
