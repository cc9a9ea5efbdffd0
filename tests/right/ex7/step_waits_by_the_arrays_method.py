"""Right: Megatron's jitted step (the reference's) returned inside a plain Python function that
waits for the step to finish by the loss array's own method, `loss.block_until_ready()`, and
returns what the jitted step returned (honest step timings in a training loop). Called under
jax.set_mesh(mesh) it trains like the reference: natively on (2, 4), Adam, D=32, H=40, B=64, losses
5.903, 4.874, 4.055.

The grader traces the step it is given; a traced array has no block_until_ready method
(AttributeError: The 'block_until_ready' method is not available on traced array), so every step
check fails with that error. The function form, jax.block_until_ready(...) around the jitted call,
gets 22/22: the grader skips it as a no-op refused in a trace, but not the method form.
optimizer_state_carries_parameter_specs's message then names another error than the learner's:
"one Adam training step from what init_tp_state returns on a (1, 8) mesh failed: ValueError: Using
PartitionSpec when you are not under a mesh context is not allowed ... Got P('data', None)": the
step is run there outside the mesh context the stub promises.

Was 13/22 at seeds 20261130, 7 and 276678 in both modes.

Full marks: the step is now traced again with the no-ops skipped where the plain trace fails
(probes.step_traced; a traced value's block_until_ready method is one of them); 22/22 in both modes
at seeds 20261130 and 7.
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
        loss.block_until_ready()  # wait for the step (honest step timings)
        return params, opt_state, loss

    return step
