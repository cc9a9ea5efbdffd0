"""WRONG: on meshes with an axis of one device the training step is a Python function that gathers
the params (and 2-D moments) whole by an eager jax.device_put to NamedSharding(mesh, P()), runs a
jitted non-Megatron step on the whole weights, and puts the results back on their specs; the
reference's jitted step on the both-axes meshes. Numbers right.

Natively on (1, 8) the eager puts compile to 6 all-gathers of weight-sized arrays. Graded: the
(1, 8) Adam step is evaluated equation by equation and the compilations that makes are read
(checks.compilations, since the grader's fix): the eager puts' all-gathers are found.
training_step_is_jitted is kept (a device_put around a jitted call computes nothing); the same
step with no jit at all on those meshes loses it (tests/corpus/ex7/
wrong_step_gathers_fully_eager_on_one_axis_meshes.py).

Scores (--seed 20261130 and --seed 7): without --sandbox 20/22, with --sandbox 20/22. Since one SGD
step is also taken on (1, 8) and (8, 1) and compiled whole there, each device is seen doing the
whole weights' work on (1, 8) too: 18/22 (seed 20261130).

loses: training_step_communicates_like_megatron: all-gathers of weight-sized arrays
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


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    if 1 not in tuple(mesh.shape.values()):
        return step
    whole = NamedSharding(mesh, P())
    back = {k: NamedSharding(mesh, s) for k, s in PARAM_SPECS.items()}

    @jax.jit
    def inner(params, opt_state, x, y):
        def loss_fn(p):
            return jnp.mean((jax.nn.relu(x @ p["w1"]) @ p["w2"] - y) ** 2)
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def eager_step(params, opt_state, x, y):
        params = jax.device_put(params, {k: whole for k in params})
        state = jax.tree.map(lambda a: jax.device_put(a, whole) if getattr(a, "ndim", 0) == 2 else a, opt_state)
        params, state, loss = inner(params, state, x, y)
        params = {k: jax.device_put(v, back[k]) for k, v in params.items()}
        state = jax.tree.map(lambda a: jax.device_put(a, back["w1" if a.shape == params["w1"].shape else "w2"]) if getattr(a, "ndim", 0) == 2 else a, state)
        return params, state, loss

    return eager_step
