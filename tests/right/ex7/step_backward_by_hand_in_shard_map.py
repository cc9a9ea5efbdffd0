"""RIGHT: the whole forward and backward written by hand per device in one shard_map
(check_vma=False), no autodiff: the forward's partial sums added over "model" by a psum, the
weights' gradients (h.T @ g_out, x.T @ g_pre) and the loss added over "data" by psums, the hidden
units' gradient g_out @ w2_blk.T local; the update in the global view under jax.jit.

22/22 at --seed 20261130, 7 and 276678, with and without --sandbox (red team, 2026-12-07).
"""

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


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    return placed, tx.init(placed)


def _local_forward_backward(w1_blk, w2_blk, x_blk, y_blk, n):
    """One device's forward and backward written by hand: its rows, its hidden units. The forward's
    partial sums are added over "model"; the weights' gradients over "data"; the loss over "data"."""
    pre = x_blk @ w1_blk                                  # (B/data, H/model)
    h = jax.nn.relu(pre)
    out = lax.psum(h @ w2_blk, "model")                   # (B/data, D)
    r = out - y_blk
    loss = lax.psum(jnp.sum(r * r), "data") / n
    g_out = (2.0 / n) * r
    g_w2 = lax.psum(h.T @ g_out, "data")                  # (H/model, D)
    g_pre = jnp.where(pre > 0, g_out @ w2_blk.T, 0.0)     # (B/data, H/model): no communication
    g_w1 = lax.psum(x_blk.T @ g_pre, "data")              # (D, H/model)
    return loss, g_w1, g_w2


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        local = jax.shard_map(lambda a, b, c, d: _local_forward_backward(a, b, c, d, y.size), mesh=mesh,
                              in_specs=(W1_SPEC, W2_SPEC, X_SPEC, X_SPEC), out_specs=(P(), W1_SPEC, W2_SPEC),
                              check_vma=False)
        loss, g1, g2 = local(params["w1"], params["w2"], x, y)
        updates, opt_state = tx.update({"w1": g1, "w2": g2}, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
