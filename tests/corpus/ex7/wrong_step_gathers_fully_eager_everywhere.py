"""WRONG: the training step is plain Python with no jax.jit anywhere, on every mesh: the params (and
2-D moments) gathered whole by eager jax.device_put to P(), the loss, gradients and Adam/SGD update
on whole weights eagerly, the results put back on their specs. Numbers right.

Graded: not jitted, and on the technique mesh the step is read whole (6 all-gathers, 2 all-reduces;
2.1 times a share of FLOPs). Contrast tests/corpus/ex7/wrong_step_gathers_fully_eager_on_one_axis_meshes.py,
the same step on one-axis meshes only, which kept everything until the SGD step was also taken on
(1, 8) and (8, 1).

Scores (--seed 20261130 and --seed 7): without --sandbox 17/22, with --sandbox 17/22.

loses: training_step_is_jitted: not jitted
loses: training_step_communicates_like_megatron: all-gathers of weight-sized arrays
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

    whole = NamedSharding(mesh, P())
    back = {k: NamedSharding(mesh, s) for k, s in PARAM_SPECS.items()}

    def inner(params, opt_state, x, y):
        # no jax.jit here: every operation eager (jnp.maximum for relu, which JAX jits)
        def loss_fn(p):
            return jnp.mean((jnp.maximum(x @ p["w1"], 0.0) @ p["w2"] - y) ** 2)
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
