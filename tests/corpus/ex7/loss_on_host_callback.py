"""WRONG: the step computes the loss and its gradients on the host: a jax.pure_callback
(NumPy) receives the whole weights and batch, so no device does Megatron's share; the numbers are
right.

Scores (--seed 20261130 and --seed 7): 13/22 with and without --sandbox (the judge refuses
the step's program: "your program holds the primitive 'pure_callback', which no exercise's program
needs", so the training runs, the jit check and the state check are lost with it).

loses: training_step_communicates_like_megatron: pure_callback
loses: each_device_does_its_share_of_the_work: pure_callback
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
    h = jax.nn.relu(x @ w1)  # column parallel: each device's own hidden units, no communication
    # Row parallel: the contracting dim is split, so the partial sums are added by one all-reduce;
    # on Explicit axes JAX asks where the sum should live.
    return jnp.matmul(h, w2, out_sharding=X_SPEC)


def _tp_mlp_local(w1_blk, w2_blk, x_blk):
    partial = jax.nn.relu(x_blk @ w1_blk) @ w2_blk  # (B/data, D): this device's share of the sum
    return lax.psum(partial, "model")


def make_tp_mlp_shard_map(mesh):
    return jax.shard_map(_tp_mlp_local, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC)


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    # The moments are zeros_like(params): made from the placed params, they inherit their split.
    return placed, tx.init(placed)


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


def _host_loss_and_grads(w1, w2, x, y):
    import numpy as np
    w1, w2, x, y = (np.asarray(a, np.float64) for a in (w1, w2, x, y))
    a = x @ w1
    h = np.maximum(a, 0)
    out = h @ w2
    r = out - y
    loss = np.mean(r ** 2)
    g_out = 2 * r / r.size
    g_w2 = h.T @ g_out
    g_h = (g_out @ w2.T) * (a > 0)
    g_w1 = x.T @ g_h
    return np.float32(loss), g_w1.astype(np.float32), g_w2.astype(np.float32)


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        w1, w2 = params["w1"], params["w2"]
        shapes = (jax.ShapeDtypeStruct((), jnp.float32), jax.ShapeDtypeStruct(w1.shape, jnp.float32),
                  jax.ShapeDtypeStruct(w2.shape, jnp.float32))
        loss, g1, g2 = jax.pure_callback(_host_loss_and_grads, shapes, w1, w2, x, y)
        g1 = jax.sharding.reshard(g1, W1_SPEC)
        g2 = jax.sharding.reshard(g2, W2_SPEC)
        grads = {"w1": g1, "w2": g2}
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
