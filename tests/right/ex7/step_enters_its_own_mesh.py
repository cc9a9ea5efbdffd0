"""Right: Megatron's jitted step (the reference's), returned inside a plain Python function that
enters `with jax.set_mesh(mesh):` and calls it, so that the step brings its own mesh and can be
called from anywhere. Called under the grader's own jax.set_mesh(mesh) (entering the same mesh again
is allowed outside a trace) and outside any mesh context it trains like the reference: natively on
(2, 4), Adam, D=32, H=40, B=64, losses 5.903, 4.874, 4.055, 3.410, the params staying
P(None, "model") / P("model", None).

The grader traces the step it is given (to send its program), and JAX refuses jax.set_mesh inside
a trace (ValueError: `set_mesh` can only be used outside of `jax.jit`.): every step check fails with
that error. init_tp_state's trace skips exactly this no-op (jax.set_mesh with the mesh it is called
under, `program.no_ops_traced`); the step's does not. A wrapper that calls jax.block_until_ready
on the jitted step's result instead (another no-op refused in a trace) gets 22/22.

Was 13/22 at seeds 20261130, 7 and 276678 in both modes (every step check lost with that error).

Full marks: the step is now traced as init_tp_state is, again with the no-ops JAX refuses in a trace
skipped where the plain trace fails (probes.step_traced); 22/22 in both modes at seeds 20261130 and 7.
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
        with jax.set_mesh(mesh):  # the step brings its own mesh: callable from anywhere
            return jitted(params, opt_state, x, y)

    return step
