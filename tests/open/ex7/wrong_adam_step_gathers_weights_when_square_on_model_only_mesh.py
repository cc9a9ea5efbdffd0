"""WRONG: Megatron except for Adam on square weights (D == H) on a mesh whose "data" axis holds one
device (e.g. (1, 8)): there the training step reshards both weights to P() (all-gather) and every
device computes the whole model's forward and backward. It tells Adam by the optimizer state's type
(an optax ScaleByAdamState). Natively on (1, 8) with optax.adam(1e-2), D = H = 32, B = 64: 2
all-gathers of the weights and 677,137 FLOPs per device (the reference: 1 all-reduce, 100,361).

The grader's steps on square weights are the Adam run on the other both-axes mesh and the momentum
SGD step on (1, 8) (checks.one_axis_sizes); the Adam steps on (1, 8) and (8, 1) are taken from
init_tp_state's output at configs()[shape], drawn without regard to D == H. At seeds 20261130, 7 and
276678 configs()[(1, 8)] is not square (48x24, 64x16, 24x32), so no Adam step on (1, 8) at D == H is
traced. Seed-dependent: 60 of seeds 0-299 draw (1, 8) square, and there it loses (seed 6: 20/22,
training_step_communicates_like_megatron: "all-gathers of weight-sized arrays (40, 40)").

Scores: 22/22 at --seed 20261130, 7 and 276678, with and without --sandbox. Expected: 20/22
(training_step_communicates_like_megatron; the FLOPs check reads the SGD steps only).
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


def _is_adam(opt_state) -> bool:
    return any(isinstance(s, optax.ScaleByAdamState)
               for s in jax.tree.leaves(opt_state, is_leaf=lambda s: isinstance(s, optax.ScaleByAdamState)))


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        d, h = params["w1"].shape
        if _is_adam(opt_state) and mesh.shape["data"] == 1 and d == h:
            params_used = jax.tree.map(lambda p: jax.sharding.reshard(p, P()), params)  # both weights whole
        else:
            params_used = params
        loss, grads = jax.value_and_grad(_loss)(params_used, x, y)
        grads = {k: jax.sharding.reshard(g, PARAM_SPECS[k]) for k, g in grads.items()}
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
