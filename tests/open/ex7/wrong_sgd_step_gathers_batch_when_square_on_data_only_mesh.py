"""WRONG: Megatron except for momentum SGD on square weights (D == H) on a mesh whose "model" axis
holds one device (e.g. (8, 1)): there the step reshards x and y to P() and every device computes the
loss and gradients of the whole batch (no data parallelism left). It tells momentum SGD by the
optimizer state's type (an optax TraceState). Natively on (8, 1) with optax.sgd(0.1, momentum=0.9),
D = H = 32, B = 64: 2 all-gathers of the batch and 681,984 FLOPs per device (the reference: 1
all-reduce, 94,465: 7.2x).

Never traced at any seed: the momentum-SGD steps are the run on the technique mesh (all sizes
distinct, so D != H), the one-axis step on (1, 8) at square sizes and the one on (8, 1) at the SGD
run's sizes (checks.one_axis_sizes), again D != H; the square steps on (8, 1) are Adam's (from
init_tp_state's output, where configs()[(8, 1)] is square, seeds 7 and 276678). A step gated on
(optimizer, mesh, D == H) together escapes the pairs the grader takes, which are fixed by design.

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
        d, h = params["w1"].shape
        if _has_trace(opt_state) and mesh.shape["model"] == 1 and d == h:
            x, y = jax.sharding.reshard(x, P()), jax.sharding.reshard(y, P())

            def loss_fn(p):
                return jnp.mean((jnp.matmul(jax.nn.relu(x @ p["w1"]), p["w2"], out_sharding=P()) - y) ** 2)
        else:
            def loss_fn(p):
                return _loss(p, x, y)
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
