"""WRONG: the reference's step whose jit also returns both new weights resharded to P() (whole on
every device, "for evaluation between steps"), which the wrapper keeps (step.whole) and does not
return. Every step of a training loop all-gathers both weights whole onto every device: the memory
and communication tensor parallelism saves, spent each step. Numbers and returned placements are the
reference's.

Scores 22/22 at --seed 20261130, 7 and 0, with and without --sandbox (22/22 on main too).
Should lose training_step_communicates_like_megatron: 20/22.

Why: the judge compiles the step as traced, whose outputs are only what the step returns; the
gathered weights flow to no output of that program and XLA removes them with their all-gathers. The
learner's jitted step returns them, so its compiled program keeps both all-gathers. Work a wrapper
keeps and does not return is dead code in every program the judge reads (first call and fed back).
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
    def jitted(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        new = optax.apply_updates(params, updates)
        # Whole weights on every device, for evaluation between steps.
        return new, opt_state, loss, {k: jax.sharding.reshard(v, P()) for k, v in new.items()}

    def step(params, opt_state, x, y):
        new, opt_state, loss, step.whole = jitted(params, opt_state, x, y)
        return new, opt_state, loss

    step.whole = None
    return step
