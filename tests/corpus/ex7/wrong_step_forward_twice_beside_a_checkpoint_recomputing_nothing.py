"""The reference's step with a second forward for the loss it returns (the params through
lax.optimization_barrier, so XLA cannot share the first forward's work), beside
jax.checkpoint(jax.value_and_grad(loss)): a checkpoint that nothing outside differentiates, so it
recomputes nothing (tests/right/ex7/remat_of_the_gradient_function.py, 1.00x). Its only effect is
to earn the step both allowances of a step under jax.checkpoint: RECOMPUTE_ALLOWANCE = 1.9 times the
grader's own Megatron step in each_device_does_its_share_of_the_work, and the 'model' budget
doubled in training_step_communicates_like_megatron. The values are right; each device runs its
forward, its psum over 'model' included, twice.

Per-device FLOPs 1.32-1.39x the grader's own Megatron step compiled on the same mesh (seeds
20261130, 7, 0, 276678, 12345; run mesh, (1, 8), (8, 1)); its second (12, 16)-sized all-reduce
over 'model' fits the doubled budget exactly.

Was: 22/22 with and without --sandbox at seeds 20261130, 7 and 0 (22/22 at 276678 and 12345
without --sandbox). The same module without the jax.checkpoint wrapper: 18/22 at seeds 20261130,
7 and 0 (training_step_communicates_like_megatron: "Yours also moves all-reduces of arrays of
shape (12, 16) (over 'model' ..."; each_device_does_its_share_of_the_work: 1.6 times a share on
(1, 8)).

Since the grader's fix (a checkpoint earns the remat allowances only where something differentiates it:
its backward's copy, marked differentiated, repeats the forward it holds; one around
jax.value_and_grad runs once and earns nothing): held to a plain share or 1.25 times the grader's own Megatron step (1.36x at
seed 20261130) and to Megatron's 'model' budget once. 18/22 at seeds 20261130, 7 and 0, with and
without --sandbox.

loses: training_step_communicates_like_megatron: Yours also moves all-reduces of arrays of shape
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
    grad_fn = jax.checkpoint(jax.value_and_grad(_loss))

    @jax.jit
    def step(params, opt_state, x, y):
        _, grads = grad_fn(params, x, y)
        loss = _loss(lax.optimization_barrier(params), x, y)  # the loss again, by a forward of its own
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
