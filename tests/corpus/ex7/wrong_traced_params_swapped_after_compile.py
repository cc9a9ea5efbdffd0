"""WRONG: tests/right/ex7/step_aot_lowered_and_compiled.py whose executables never train: a step that
returns the params it was given is traced, lowered and compiled (jax.jit(frozen).trace(...).lower()
.compile(), nothing swapped in its Lowered or Compiled); afterwards the Traced it was lowered from is
given the right step's jaxpr and constants (traced._params = {**right._params}). Every real call
leaves the params unchanged (the optimizer state advances, the loss is right).

Scored 22/22 with and without --sandbox, seeds 20261130, 7 and 0 (natively: a 3-step SGD run on a
(2, 4) mesh logs one constant loss, the params never change): program.compiled_calls_traced checks
the Lowered's lowering and text and the Compiled's _executable, but binds the jaxpr and constants
the Traced object holds when the call is made (traced._params, traced._consts), which is no longer
what the executable was compiled from.

Should lose both training checks at least, as tests/corpus/ex7/wrong_aot_step_compiled_from_a_frozen_lowering
does (13/22).

Now read with the program it was compiled from, as its lowering was made (program.compiled_calls_traced snapshots the jit's parameters at lowering and reads a Compiled only while its executable, call parameters and call are the ones JAX made): its training runs show what a real run does. 13/22 in both modes (seeds 20261130, 0).

loses: sgd_training_matches_single_device: got [
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
    def _step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def _frozen(params, opt_state, x, y):
        new_params, opt_state, loss = _step(params, opt_state, x, y)
        return jax.tree.map(lambda p, q: p + 0 * q, params, new_params), opt_state, loss

    jitted, frozen = jax.jit(_step), jax.jit(_frozen)
    cache = {}

    def step(params, opt_state, x, y):
        key = jax.tree.map(lambda a: (a.shape, str(a.dtype), str(getattr(a, "sharding", None))), (params, opt_state, x, y))
        key = str(key)
        if key not in cache:
            traced = frozen.trace(params, opt_state, x, y)
            cache[key] = traced.lower().compile()
            # The Traced the executable came from now holds the right step's program (a new dict:
            # the jit keeps the first in its cache).
            right = jitted.trace(params, opt_state, x, y)
            traced._params = {**right._params}
            traced._consts = right._consts
        return cache[key](params, opt_state, x, y)

    return step
