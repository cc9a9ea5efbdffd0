"""WRONG: a Megatron step that trains Megatron-style only where it can read, inside its jit, that the
params arrive split that way (`params[k].sharding.spec`, a defensive check that gathers both
weights whole where the placement cannot be told), returned inside a plain function that enters
`with jax.set_mesh(mesh):` and calls it (as tests/right/ex7/step_enters_its_own_mesh does). Inside
jax.jit a traced value has no .sharding (AttributeError), so when the learner calls the step, the
check always fails and the step always gathers: natively on (2, 4), Adam, D=32, H=40, B=64, its
compiled program all-gathers w1 (32, 40) and w2 (40, 32) whole over 'model' and does 436,252
FLOPs a device, 3.65x the reference's 119,498 (same losses, the params returned on their specs).

The grader's plain trace fails at the wrapper's jax.set_mesh (refused in a trace), and the trace
made again with the no-ops skipped (probes.step_traced, program.no_ops_traced) gives every traced
value a .sharding, the inner jit's too: the step's check succeeds there only, and the program the
judge reads, runs and compiles is the Megatron one. The module detects the retry without naming
anything of the grader: the patched .sharding reaches code inside the learner's own jit, which no
eager call has.

Was 22/22 at seeds 20261130, 7 and 276678 in both modes: the trace made again with the no-ops skipped
gave every traced value a .sharding, inside the learner's jit too. Since the grader's fix only the
values at the trace's top level (the eager call's arrays) have one there: 18/22 in both modes at seeds
20261130 and 7.

loses: training_step_communicates_like_megatron: all-gathers of weight-sized arrays
loses: each_device_does_its_share_of_the_work: devices repeat each other's work
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


def _where_split(a):
    """The spec the value arrives with, or None where it cannot be told."""
    try:
        return a.sharding.spec
    except AttributeError:
        return None


def _make_jitted(tx):
    @jax.jit
    def step(params, opt_state, x, y):
        # Defensive: train Megatron-style only on params known to arrive split that way; anything
        # else is gathered whole first (safe on any placement).
        if any(_where_split(params[k]) != PARAM_SPECS[k] for k in PARAM_SPECS):
            params = {k: jax.sharding.reshard(v, P(None, None)) for k, v in params.items()}
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        new = optax.apply_updates(params, updates)
        new = {k: jax.sharding.reshard(v, PARAM_SPECS[k]) for k, v in new.items()}
        return new, opt_state, loss

    return step


def make_tp_train_step(mesh, tx):
    jitted = _make_jitted(tx)

    def step(params, opt_state, x, y):
        with jax.set_mesh(mesh):  # the step brings its own mesh: callable from anywhere
            return jitted(params, opt_state, x, y)

    return step
