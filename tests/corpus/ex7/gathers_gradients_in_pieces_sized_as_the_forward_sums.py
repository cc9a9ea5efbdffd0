"""A shard_map step that gathers both weights' gradients whole onto every device of the
"model" axis (clipping them by their whole norm, then keeping its own block again), as
tests/corpus/ex7/step_gathers_gradients_by_block_sized_psums does, but in pieces whose size is
that of Megatron's own forward all-reduce over "model": each gradient is laid in a zero buffer of
the whole weight's shape at its own place, flattened, padded and cut into pieces of
(B/data) * D numbers (the size of the forward's partial sums), and each piece is psum'd over
"model". Every device receives model times the gradient it needs.

Each piece has the operation, size and axis of Megatron's own forward all-reduce over "model";
training_step_communicates_like_megatron counts every collective each time it runs, so at seed
20261130 on (4, 2) (D=16, H=40, B=48) the step sums 1,728 numbers over "model" where Megatron
sums 192. 20/22 in both modes at seeds 20261130, 7 and 276678 (22/22 while a collective equal to
one of Megatron's was counted once however often it repeated).

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


def _gathered_over_model(blk, axis: int, piece: int):
    """The whole array on every device: this device's block at its place in a zero buffer, added
    over "model" piece by piece, each piece `piece` numbers."""
    me, n = lax.axis_index("model"), lax.axis_size("model")
    shape = list(blk.shape)
    shape[axis] *= n
    buf = lax.dynamic_update_slice_in_dim(jnp.zeros(shape, blk.dtype), blk, me * blk.shape[axis], axis)
    flat = buf.ravel()
    flat = jnp.pad(flat, (0, (-flat.size) % piece))
    pieces = flat.reshape(-1, piece)
    summed = jnp.concatenate([lax.psum(pieces[i], "model") for i in range(pieces.shape[0])])
    return summed[:buf.size].reshape(shape)


def make_tp_train_step(mesh, tx):
    def local_grads(w1_blk, w2_blk, x_blk, y_blk, n):
        a, b = (lax.pcast(w, ("data",), to="varying") for w in (w1_blk, w2_blk))

        def local_loss(a, b):
            return jnp.sum((_tp_mlp_local(a, b, x_blk) - y_blk) ** 2) / n

        loss, (g1, g2) = jax.value_and_grad(local_loss, argnums=(0, 1))(a, b)
        g1, g2 = lax.psum(g1, "data"), lax.psum(g2, "data")
        piece = x_blk.size  # (B/data) * D: the forward's partial sums
        g1_all, g2_all = _gathered_over_model(g1, 1, piece), _gathered_over_model(g2, 0, piece)
        scale = jnp.minimum(1.0, 1e6 / jnp.sqrt(jnp.sum(g1_all ** 2) + jnp.sum(g2_all ** 2)))
        me, k = lax.axis_index("model"), g1.shape[1]
        g1 = lax.dynamic_slice_in_dim(g1_all * scale, me * k, k, 1)
        g2 = lax.dynamic_slice_in_dim(g2_all * scale, me * k, k, 0)
        return lax.psum(loss, "data"), g1, g2

    def step(params, opt_state, x, y):
        grads_fn = jax.shard_map(lambda a, b, c, d: local_grads(a, b, c, d, y.size), mesh=mesh,
                                 in_specs=(W1_SPEC, W2_SPEC, X_SPEC, X_SPEC), out_specs=(P(), W1_SPEC, W2_SPEC))
        loss, g1, g2 = grads_fn(params["w1"], params["w2"], x, y)
        updates, opt_state = tx.update({"w1": g1, "w2": g2}, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return jax.jit(step)
