"""Right: the reference's step with the loss differentiated under jax.checkpoint with the remat
policy jax.checkpoint_policies.checkpoint_dots (the matmuls' outputs saved, only the cheap
elementwise work recomputed in the backward pass).

each_device_does_its_share_of_the_work measures a step holding jax.checkpoint against twice the
grader's own single-device step (RECOMPUTE_ALLOWANCE) and asks for at least 1/1.5 of that share:
a policy that saves the dots recomputes almost nothing, so the step does about one share and is
read as doing too little: at seed 20261130 on (4, 2), 44,770 FLOPs per device where the doubled
share is 80,736 (0.55, under 0.67). The same step written as two jitted functions called one
after the other (the gradients, then the update) scores the same.

Full marks: a step under jax.checkpoint is held to a share of the grader's own step from below
(a policy saving the dots recomputes almost nothing) and from above to RECOMPUTE_ALLOWANCE times
the grader's own Megatron step compiled on the same mesh.
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


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    return placed, tx.init(placed)


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(jax.checkpoint(_loss, policy=jax.checkpoint_policies.checkpoint_dots))(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
