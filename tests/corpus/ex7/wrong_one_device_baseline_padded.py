"""WRONG: every device of the training step also does a large replicated computation (a (N, N)
matmul made from the loss, N = 8*(D+H), added to the loss times 0): each device does far more than
its share. make_tp_train_step pads the same step on a one-device mesh with that waste times the
mesh's size, so the grader's baseline ("your step on one device") grows with it.

Verbose at seed 20261130: "per-device FLOPs of the training step on a (4, 2) mesh: 180,877,968
(your step on one device: 1,441,377,664; a 1/8 share: 180,172,208)"; the reference's step does
43,665 there. The baseline of the step's share is the learner's own step compiled on a one-device
mesh, which make_tp_train_step can tell from the mesh it is given (mesh.size == 1) and pad. The
collectives are Megatron's (2 all-reduces), so only the share check can catch it.

Scores (--seed 20261130 and --seed 7, main mesh (4, 2) at both): without --sandbox 22/22, with
--sandbox 22/22; verbose output identical in both modes. Expected: 20/22 (each_device_does_its_share_of_the_work lost).

loses: each_device_does_its_share_of_the_work: the grader's own step on one device

Since the step's share is taken of the grader's own single-device step (twice that for a
step holding jax.checkpoint, RECOMPUTE_ALLOWANCE): 20/22 at seed 7.
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
    reps = 8 if mesh.size == 1 else 1

    def waste(loss, n):
        a = (jnp.arange(n * n, dtype=jnp.float32).reshape(n, n) / (n * n)) * lax.stop_gradient(loss)
        total = 0.0
        for _ in range(reps):
            a = jnp.tanh(a @ a)
            total = total + jnp.sum(a)
        return total

    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        d, h = params["w1"].shape
        loss = loss + 0.0 * waste(loss, 8 * (d + h))
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
