"""Right: the reference's jitted Megatron step, returned inside a plain function that calls it and
then starts the loss's transfer to the host with `loss.copy_to_host_async()` (so that a training
loop logging the loss later does not stall on it; the values and placement are untouched).
Natively on (2, 4), Adam, D=32, H=40, B=64 it trains like the reference (losses 1.491, 1.297,
1.158, 1.058 at that script's data), the params staying P(None, 'model') / P('model', None).

The grader traces the step, and a traced array refuses copy_to_host_async (AttributeError: The
'copy_to_host_async' method is not available on traced array); program.no_ops_traced skips
block_until_ready, jax.set_mesh of the mesh already set and .sharding, not this method, which does
nothing to the values either. Every step check fails, and the message shown is not even the
learner's own error: the plain trace is retried outside any mesh (probes.traced), so the learner
reads "Using PartitionSpec when you are not under a mesh context is not allowed" (from tp_mlp's
out_sharding), a hint unrelated to the wrapper.

Was 13/22 at seeds 20261130 and 7 in both modes.

Full marks: the step is traced again with the no-ops JAX refuses in a trace skipped where the plain
trace fails (probes.step_traced; copy_to_host_async is one of the no-ops, program.no_ops_traced): 22/22 in both modes at seeds 20261130 and 7.
"""
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


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    return placed, tx.init(placed)


def _make_jitted(tx):
    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step


def make_tp_train_step(mesh, tx):
    jitted = _make_jitted(tx)

    def step(params, opt_state, x, y):
        params, opt_state, loss = jitted(params, opt_state, x, y)
        loss.copy_to_host_async()  # start the loss's transfer now: logging it later does not stall
        return params, opt_state, loss

    return step
