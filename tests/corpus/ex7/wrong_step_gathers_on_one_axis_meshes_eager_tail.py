"""WRONG: tests/corpus/ex7/step_gathers_on_one_axis_meshes
(the step gathers both weights whole inside the loss on any mesh with an axis of one device) with
the step returned as a plain Python function: a jitted inner step, then the loss made a float32
array eagerly outside the jit (jnp.asarray(loss, jnp.float32)).

Natively its jitted inner step on (1, 8) with Adam compiles to 2 all-gathers and no all-reduce,
86,673 FLOPs per device (the reference: 1 all-reduce, 13,897), as the corpus module's. Was graded
21/22: training_step_is_jitted lost (1 pt, right), but training_step_communicates_like_megatron
kept: the Adam step read from init_tp_state's output (then on (1, 8) only) was None for a step with operations outside a jit
(step_calls(closed)["outside"] != 0: evaluated equation by equation, not compiled), so the one-axis
read that catches the corpus module is skipped; on the both-axes meshes it is Megatron. One eager
multiply buys back the 2 points the one-axis reading takes.

Since the grader's fix a step evaluated equation by equation has the compilations that makes read for
collectives (checks.compilations: its jitted call, compiled as the learner's call compiles it).

Scores (--seed 20261130 and --seed 7): without --sandbox 19/22, with --sandbox 19/22 (21/22 in both
modes before the grader's fix). Should get 19/22.

loses: training_step_is_jitted: part of your step runs outside jax.jit
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
    one_axis = 1 in tuple(mesh.shape.values())

    def loss_fn(params, x, y):
        if one_axis:
            params = {k: jax.sharding.reshard(v, P()) for k, v in params.items()}
            return jnp.mean((jax.nn.relu(x @ params["w1"]) @ params["w2"] - y) ** 2)
        return _loss(params, x, y)

    @jax.jit
    def inner(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def step(params, opt_state, x, y):
        params, opt_state, loss = inner(params, opt_state, x, y)
        return params, opt_state, jnp.asarray(loss, jnp.float32) * 1.0

    return step
