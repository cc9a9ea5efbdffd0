"""WRONG: Megatron except for momentum SGD where the batch has as many rows as the model's width
(B == D): there the step reshards both weights to P() (all-gather) and every device computes the
whole model's forward and backward for its rows. It tells momentum SGD by the optimizer state's type
(an optax TraceState) and B == D by x's shape. Natively on (2, 4) with optax.sgd(0.1, momentum=0.9),
D = 48, H = 40, B = 48: 2 all-gathers of the weights beside 1 all-reduce, 478,663 FLOPs per device
(the reference: 2 all-reduces, 129,169: 3.7x).

Never traced at any seed: the momentum-SGD steps are at the technique mesh's sizes (every size
distinct, so B != D; on (4, 2) and on (8, 1)) and at square sizes on (1, 8), whose batch is drawn
with B != D (checks.one_axis_sizes, so that a batch and a weight do not share a shape). B == D is
drawn for Adam only (seed 7's Adam run (48, 48, 48) and its (1, 8) state step (64, 16, 64), seed
20261130's (8, 1) state step (40, 64, 40)). The grader keeps B != D to read shapes; a step keyed on
that very equality is never read.

Scores: 22/22 at --seed 20261130, 7 and 276678, with and without --sandbox. Expected: 18/22
(training_step_communicates_like_megatron, each_device_does_its_share_of_the_work).
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


def _has_trace(opt_state) -> bool:
    return any(isinstance(s, optax.TraceState)
               for s in jax.tree.leaves(opt_state, is_leaf=lambda s: isinstance(s, optax.TraceState)))


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        if _has_trace(opt_state) and x.shape[0] == x.shape[1]:  # momentum SGD with B == D
            params_used = jax.tree.map(lambda p: jax.sharding.reshard(p, P()), params)  # both weights whole
        else:
            params_used = params
        loss, grads = jax.value_and_grad(_loss)(params_used, x, y)
        grads = {k: jax.sharding.reshard(g, PARAM_SPECS[k]) for k, g in grads.items()}
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
