"""RIGHT: the training step's gradients written out by hand in the global view, with no jax.grad,
vjp or value_and_grad: each matmul of the backward pass states where its result lives
(h.T @ g_out on P("model", None), x.T @ g_pre on P(None, "model"), g_out @ w2.T on
P("data", "model")), so the contracting dims split over "data" are summed there; the loss is
jnp.sum(r * r) / r.size.

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


def _forward_and_backward(params, x, y):
    """The loss and its gradients written out by hand in the global view, each matmul saying where
    its result lives (the contracting dims split over "data" or "model" are summed there)."""
    w1, w2 = params["w1"], params["w2"]
    pre = x @ w1                                            # (B, H): P("data", "model"), no communication
    h = jax.nn.relu(pre)
    out = jnp.matmul(h, w2, out_sharding=X_SPEC)           # (B, D): summed over "model"
    r = out - y
    n = r.size
    loss = jnp.sum(r * r) / n
    g_out = (2.0 / n) * r                                   # (B, D): P("data", None)
    g_w2 = jnp.matmul(h.T, g_out, out_sharding=W2_SPEC)    # (H, D): summed over "data"
    g_h = jnp.matmul(g_out, w2.T, out_sharding=P("data", "model"))  # (B, H): no communication
    g_pre = jnp.where(pre > 0, g_h, 0.0)
    g_w1 = jnp.matmul(x.T, g_pre, out_sharding=W1_SPEC)    # (D, H): summed over "data"
    return loss, {"w1": g_w1, "w2": g_w2}


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = _forward_and_backward(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
