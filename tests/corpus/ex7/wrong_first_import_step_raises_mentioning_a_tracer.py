"""WRONG: the reference's jitted step in a wrapper that logs float() of its loss (so it cannot be
traced), whose step, in the module as first imported (what a training script imports), raises
RuntimeError("step state holds a stale tracer") on every real call; a copy of the file imported again
(a second import in one process) trains as the reference does. A training script importing it once
never takes one step.

Scored 22/22 with and without --sandbox, seeds 20261130, 7 and 0: the real call's error mentions
"tracer", so probes.met_a_tracer takes it for a tracer the grader's traces left, and the step is read
from a fresh import of the file, which behaves otherwise. Should lose every step check: the same
module raising "step state holds a stale value" scores 13/22 (seed 20261130).

Now 13/22 at seed 20261130 without --sandbox (the fresh import is taken only where the module's state holds a tracer of the grader's traces, not on an error that mentions one; the real call's own error is said: program.compiled_calls_traced, probes.step_maker).

loses: sgd_training_matches_single_device: stale tracer
"""
import jax
import sys
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



# Imports of this file in this process: the first one's steps fail.
_COUNT = sys.modules["jax"].__dict__.setdefault("_imports_of_" + __file__, [])
_COUNT.append(1)
_FIRST = len(_COUNT) == 1


def make_tp_train_step(mesh, tx):
    @jax.jit
    def jitted(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    calls = [0]

    def step(params, opt_state, x, y):
        out = jitted(params, opt_state, x, y)
        calls[0] += 1
        print(f"step {calls[0]} loss {float(out[2]):.5f}")
        if _FIRST:
            raise RuntimeError("step state holds a stale tracer")
        return out

    return step
