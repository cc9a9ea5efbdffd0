"""WRONG: on meshes with an axis of one device ((1, 8), (8, 1)) the training step is plain Python with
no jax.jit anywhere: the params (and 2-D moments) are gathered whole by an eager jax.device_put to
NamedSharding(mesh, P()), the loss, gradients and Adam update run eagerly on whole weights
(relu written as jnp.maximum, since jax.nn.relu is itself jitted), and the results are put back on
their specs. On the both-axes meshes it is the reference's jitted Megatron step. Numbers right.

Natively on (1, 8) the eager device_puts compile to 6 all-gathers of weight-sized arrays and every
device multiplies whole weights. Graded 22/22: the (1, 8) Adam step is evaluated equation by
equation (it has operations outside a jit), and checks.state_runs reads the compilations made
meanwhile only `if any(eqn.primitive.name == "jit" ...)` at the step's top level; this step has
no jit equation, so `compiled` stays None and the verbose line even says "collectives in the
compiled Adam training step on a (1, 8) mesh: no collectives". training_step_is_jitted reads only
the SGD step on the technique mesh, which is jitted. The same step with one jitted inner function
(tests/corpus/ex7/wrong_step_replicates_by_eager_device_put_on_one_axis_meshes.py) loses the 2
points: its eager puts' compilations are read.

Scores (--seed 20261130 and --seed 7): without --sandbox 22/22, with --sandbox 22/22. Should get
19/22: training_step_communicates_like_megatron (2: all-gathers of weight-sized arrays on (1, 8))
and training_step_is_jitted (1: the step on one-axis meshes runs no jit at all).
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
