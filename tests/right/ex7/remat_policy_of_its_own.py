"""Right: the reference's loss under jax.checkpoint with a policy of the learner's own (a function
of the primitive keeping every matmul's result, lax.dot_general_p: what
jax.checkpoint_policies.checkpoint_dots does, written out). It trains as the reference does (the
same losses to float32 rounding on a (2, 4) mesh run by hand) and communicates like it.

Was 13/22 with and without --sandbox at seeds 20261130, 7 and 0: the program encoding refused the
policy ("your program holds a function (_save_matmuls) in a parameter"), so every step check
failed. The step's program now carries such a policy as its number (program.encode with
custom_policies, as ex6 sends one): the judge only lowers and runs the step, and lowering a
checkpoint never calls its policy, so the placeholder it rebuilds (CustomPolicy) is never asked
anything; in-process (no --sandbox) program.as_sent puts the same placeholder in its place.

Full marks: a policy is the learner's to choose (the chapter's remat lesson writes its own), and
what it saves changes memory, not the values, the collectives or (beyond rematerialising's
allowance) the work. 22/22 with and without --sandbox at seeds 20261130, 7 and 0.
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


def _save_matmuls(prim, *_, **__):
    """Keep every matmul's result; recompute the cheap elementwise work (relu, the error)."""
    return prim is lax.dot_general_p


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


def make_tp_train_step(mesh, tx):
    loss_fn = jax.checkpoint(_loss, policy=_save_matmuls)

    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
