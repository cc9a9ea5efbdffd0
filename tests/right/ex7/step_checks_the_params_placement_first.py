"""Right: Megatron's jitted step (the reference's) returned inside a plain Python function that
checks, before calling it, that each parameter array lies where Megatron puts it
(`params[k].sharding.is_equivalent_to(NamedSharding(mesh, spec), ndim)`), raising a ValueError
otherwise instead of letting jit reshard silently: defensive code a training script may carry.
Called under jax.set_mesh(mesh) with the placed params it trains like the reference: natively on
(2, 4), Adam, D=32, H=40, B=64, losses 5.903, 4.874, 4.055.

The grader traces the step it is given, and a traced array has no .sharding (AttributeError: The
'sharding' attribute is not available on traced array ... use `jax.typeof(x)`), so every step
check fails with that error: the grader "calls it as you return it" (the stub) but traces it, so
Python that only a concrete array supports, around a jitted step, fails there
(tests/right/ex7/step_enters_its_own_mesh, step_waits_by_the_arrays_method likewise).

Was 13/22 at seeds 20261130, 7 and 276678 in both modes.

Full marks: in the trace made again with the no-ops skipped (probes.step_traced), a traced value's
.sharding reads its type's sharding on the mesh (program.no_ops_traced), which is what the eager
call's array has; 22/22 in both modes at seeds 20261130 and 7.
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
    want = {"w1": NamedSharding(mesh, W1_SPEC), "w2": NamedSharding(mesh, W2_SPEC)}

    def step(params, opt_state, x, y):
        for k, s in want.items():  # fail loudly on misplaced params instead of silently resharding
            if not params[k].sharding.is_equivalent_to(s, params[k].ndim):
                raise ValueError(f"params[{k!r}] is on {params[k].sharding}, expected {s}")
        return jitted(params, opt_state, x, y)

    return step
