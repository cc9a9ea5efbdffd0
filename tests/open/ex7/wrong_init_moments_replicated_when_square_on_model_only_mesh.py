"""WRONG: init_tp_state places the parameters Megatron-style, but on a mesh whose "data" axis holds
one device (e.g. (1, 8)) with square weights (D == H) it builds the optimizer state by tx.init of
whole copies put on P(): every moment (momentum SGD's trace, Adam's mu and nu) is replicated there,
every device storing every moment whole. Natively on (1, 8), D = H = 32, momentum SGD: the trace's
two leaves come out P() (the step then returns them split, since its update follows the gradients).

The state check gives init_tp_state both optimizers on all four meshes, each at configs()[shape];
D == H is drawn on the other both-axes mesh only, and at seeds 20261130, 7 and 276678 configs()[(1, 8)]
is not square (48x24, 64x16, 24x32). Seed-dependent: 60 of seeds 0-299 draw (1, 8) square, and there
it loses (seed 6: 20/22, optimizer_state_carries_parameter_specs: "it is replicated").

Scores: 22/22 at --seed 20261130, 7 and 276678, with and without --sandbox. Expected: 20/22
(optimizer_state_carries_parameter_specs).
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
    d, h = params["w1"].shape
    if mesh.shape["data"] == 1 and d == h:
        # square weights on a mesh whose "data" axis holds one device: the state made from whole copies
        whole = {k: jax.device_put(v, NamedSharding(mesh, P())) for k, v in params.items()}
        return placed, tx.init(whole)
    return placed, tx.init(placed)


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
