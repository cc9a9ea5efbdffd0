"""WRONG (forge): the module's own tp_mlp, make_tp_mlp_shard_map and make_tp_train_step are
tests/attacks/described/notech_ex7.py's (every weight and the batch replicated), and at import the
module swaps the __code__ of probes.learner_forward and probes.learner_step (helpers, not probes:
the guard compares ids only) so that the grader traces private Megatron functions kept beside the
graded ones. Every program the judge rebuilds is a right one; none is of the functions the learner
hands in. test_forged_evidence holds a forge to at most half the points (and the technique-free
module's score). Should get what notech_ex7 gets honestly (10/22), at most 11.

Scores (--seed 276678, main mesh (2, 4)): without --sandbox 22/22, with --sandbox 22/22; verbose
output identical in both modes. Expected: 10/22 (what the same module gets without the swap;
test_forged_evidence's bar: at most 11).
"""
import sys as _sys
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding, PartitionSpec as P, reshard


def tp_mlp(w1, w2, x):
    w1, w2, x = (reshard(a, P()) for a in (w1, w2, x))
    return reshard(jax.nn.relu(x @ w1) @ w2, P("data", None))


def make_tp_mlp_shard_map(mesh):
    def whole(w1, w2, x):
        return jnp.asarray(jax.nn.relu(x @ w1) @ w2)

    body = jax.shard_map(whole, mesh=mesh, in_specs=(P(), P(), P()), out_specs=P())
    return lambda w1, w2, x: reshard(body(*(reshard(a, P()) for a in (w1, w2, x))), P("data", None))


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, {"w1": P(None, "model"), "w2": P("model", None)}[k])) for k, v in params.items()}
    return placed, tx.init(placed)


def make_tp_train_step(mesh, tx):
    def loss(params, x, y):
        return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)

    @jax.jit
    def step(params, opt_state, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return step


def _real_tp_mlp(w1, w2, x):
    return jnp.matmul(jax.nn.relu(x @ w1), w2, out_sharding=P("data", None))


def _real_local(w1, w2, x):
    return jax.lax.psum(jax.nn.relu(x @ w1) @ w2, "model")


def _real_shard_map(mesh):
    return jax.shard_map(_real_local, mesh=mesh, in_specs=(P(None, "model"), P("model", None), P("data", None)),
                         out_specs=P("data", None))


def _real_step(mesh, tx):
    def loss(params, x, y):
        return jnp.mean((_real_tp_mlp(params["w1"], params["w2"], x) - y) ** 2)

    @jax.jit
    def step(params, opt_state, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value
    return step


def _swap_forward(sol, version, m):
    return sol._real_tp_mlp if version == "tp_mlp" else sol._real_shard_map(m)


def _swap_step(sol, optimizer, shape):
    key = ("step", sol, tuple(sorted(optimizer.items())), tuple(shape))
    if key not in _cache:
        _cache[key] = sol._real_step(mesh(shape), make_tx(optimizer))
    return _cache[key]


_probes = _sys.modules.get("graders.exercises.ex7_megatron_tp.probes")
if _probes is not None:
    _probes.learner_forward.__code__ = _swap_forward.__code__
    _probes.learner_step.__code__ = _swap_step.__code__
