"""RIGHT: tests/right/ex7/step_keeps_a_device_step_counter_at_module_level.py with the module-level
dict of device step counters kept as an attribute of a types.SimpleNamespace (_LOG.taken) instead of
a bare module-level dict. Natively the reference's losses and placements.

Scored 20/22 with and without --sandbox, seeds 20261130, 7 and 0: optimizer_state_carries_parameter_specs
says "UnexpectedTracerError: Encountered an unexpected tracer". The grader's traces of the step
leave their tracer in _LOG.taken; probes.holds_a_tracer walks globals, containers and objects of
the learner's own module only, so a types.SimpleNamespace (module 'types') is not looked into, the
step is made from the module as imported, and the real call meets the grader's stale tracer. A
real run has no such tracer. The same dict held as a bare global scores 22/22
(tests/right/ex7/step_keeps_a_device_step_counter_at_module_level.py); by the walk's code (not graded
here), threading.local(), a functools.partial's arguments and containers nested more than 5 deep
are the same blind spot.
Should score 22/22.

Full marks: the module state's walk (probes.holds_a_tracer) now looks into any object's attributes, a namespace's included. 22/22 in both modes (seeds 20261130, 7).
"""
import functools
import types
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

W1_SPEC = P(None, "model")
W2_SPEC = P("model", None)
X_SPEC = P("data", None)
PARAM_SPECS = {"w1": W1_SPEC, "w2": W2_SPEC}


def tp_mlp(w1, w2, x):
    h = jax.nn.relu(x @ w1)
    return jnp.matmul(h, w2, out_sharding=X_SPEC)


def _tp_mlp_local(w1_blk, w2_blk, x_blk):
    return lax.psum(jax.nn.relu(x_blk @ w1_blk) @ w2_blk, "model")


def make_tp_mlp_shard_map(mesh):
    return jax.shard_map(_tp_mlp_local, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC)


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    return placed, tx.init(placed)


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


def _make_jitted(tx, scale):
    @jax.jit
    def step(params, opt_state, x, y, t):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        updates = jax.tree.map(lambda u: u * scale, updates)
        return optax.apply_updates(params, updates), opt_state, loss, t + 1

    return step


_LOG = types.SimpleNamespace(taken={})  # steps taken, on the device, for logging


def make_tp_train_step(mesh, tx):
    first = _make_jitted(tx, 1.0)
    later = _make_jitted(tx, 1.0)
    returned = []

    def step(params, opt_state, x, y):
        if _LOG.taken.get(mesh) is None:
            _LOG.taken[mesh] = jnp.zeros((), jnp.int32)
        fed_back = bool(returned) and all(a is b for a, b in zip(jax.tree.leaves(params), returned))
        new, opt_state, loss, _LOG.taken[mesh] = (later if fed_back else first)(params, opt_state, x, y, _LOG.taken[mesh])
        returned[:] = jax.tree.leaves(new)
        return new, opt_state, loss

    return step
