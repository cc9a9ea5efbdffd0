"""WRONG: the training step is Megatron's, except for Adam on a mesh whose "model" axis holds one
device (e.g. (8, 1)): there it reshards x and y to P() and every device computes the loss and
gradients of the whole batch (no data parallelism left). It tells Adam by the optimizer state's
type (an optax ScaleByAdamState in opt_state).

The grader took Adam steps on the other both-axes mesh and, from init_tp_state's output, on
(1, 8) only; the one-axis SGD steps (checks.one_axis_steps) are momentum SGD's. No Adam step was
then traced on (8, 1), so what it does there was never seen (a first version, without the
out_sharding=P() below, even raised there, and scored 22/22 too at seed 20261130). Natively on
(8, 1) with optax.adam(1e-2), D=40, H=48, B=80: 2 all-gathers of the (80, 40) batch and 1,619,593 FLOPs per device (the
reference: 1 all-reduce of the weights' gradients, 249,850 FLOPs).

Was 22/22 in both modes (seeds 20261130 and 7). Since the grader's fix the state check takes an Adam
step from init_tp_state's output on (8, 1) too (ADAM_STEP_MESHES), compiled whole there, and
training_step_communicates_like_megatron reads its collectives: 20/22 in both modes at seeds 20261130
and 7 (each_device_does_its_share_of_the_work reads the SGD steps' FLOPs only; the 2 all-gathers of
the batch are what gives it away).

loses: training_step_communicates_like_megatron: all-gathers of whole batches
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
    h = jax.nn.relu(x @ w1)  # column parallel: each device's own hidden units
    return jnp.matmul(h, w2, out_sharding=X_SPEC)  # row parallel: one all-reduce over "model"


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
        if _is_adam(opt_state) and mesh.shape["model"] == 1:
            # Adam on a mesh whose "model" axis holds one device: every device takes the whole batch.
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
