"""RIGHT: the reference's step, donating its params and state, compiled ahead of time from abstract
shapes with their shardings (jax.jit(f, donate_argnames=...).trace(**ShapeDtypeStructs)
.lower().compile(), once per argument types, cached) and called with keywords, in a wrapper that logs
float() of each call's loss. Natively the reference's losses and placements.

Full marks (with and without --sandbox, seeds 20261130, 7 and 0): while a probe runs, a Compiled made
meanwhile is traced as the jit it was compiled from (program.compiled_calls_traced); before that
change JAX refused to trace it ("Cannot apply JAX transformations to a function lowered and compiled
for a particular signature").
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


def _abstract(a):
    sharding = a.sharding if isinstance(a, jax.Array) and not isinstance(a, jax.core.Tracer) else jax.typeof(a).sharding
    return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding)


def make_tp_train_step(mesh, tx):
    def _step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    jitted = jax.jit(_step, donate_argnames=("params", "opt_state"))
    cache = {}
    losses = []

    def step(params, opt_state, x, y):
        kwargs = {"params": params, "opt_state": opt_state, "x": x, "y": y}
        specs = jax.tree.map(_abstract, kwargs)
        key = str(jax.tree.map(lambda s: (s.shape, str(s.dtype), str(s.sharding)), specs))
        if key not in cache:
            cache[key] = jitted.trace(**specs).lower().compile()
        params, opt_state, loss = cache[key](**kwargs)
        losses.append(float(loss))
        print(f"step {len(losses)} loss {losses[-1]:.5f}")
        return params, opt_state, loss

    return step
