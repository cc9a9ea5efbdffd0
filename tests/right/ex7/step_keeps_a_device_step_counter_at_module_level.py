"""RIGHT: the reference's jitted step, also taking and returning a scalar int32 `t` (steps taken,
for logging) that the wrapper keeps on the device in a module-level dict keyed by mesh (not in the
step's closure, as tests/right/ex7/step_carries_a_device_step_counter.py keeps it). Natively the
reference's losses and placements.

Full marks. It scored 20/22: the grader's traces of the step left their tracers in the module's
dict, which a later trace took as a constant (optimizer_state_carries_parameter_specs: "could not
check what your code returned: TracerArrayConversionError"). Now a step called for real is made by
the learner's file imported afresh (verdicts.imported_afresh), and a trace holding a tracer of an
earlier trace as a constant is read from the call run for real instead (probes.step_read).
"""
import functools
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


_TAKEN = {}  # steps taken, on the device, for logging


def make_tp_train_step(mesh, tx):
    first = _make_jitted(tx, 1.0)
    later = _make_jitted(tx, 1.0)
    returned = []

    def step(params, opt_state, x, y):
        if _TAKEN.get(mesh) is None:
            _TAKEN[mesh] = jnp.zeros((), jnp.int32)
        fed_back = bool(returned) and all(a is b for a, b in zip(jax.tree.leaves(params), returned))
        new, opt_state, loss, _TAKEN[mesh] = (later if fed_back else first)(params, opt_state, x, y, _TAKEN[mesh])
        returned[:] = jax.tree.leaves(new)
        return new, opt_state, loss

    return step
