"""WRONG: tests/corpus/ex7/wrong_step_replicates_when_fed_its_own_outputs keyed on the sharding object
instead of the arrays: eagerly every output of one compiled program carries the very same Sharding
object (jax.jit's executable hands each call's outputs its own out-sharding), while arrays the
caller placed carry the caller's; the step hands the params on replicated (P(None, None)) when
params['w1'].sharding is the object its own last output carried. Natively on (2, 4), Adam, D=32,
H=40, B=64: the reference's losses (2.004, 1.8596, 1.6363, 1.551), the params P(None, 'model') /
P('model', None) after step 1 and P(None, None) from step 2 on.

Was 22/22 at --seed 20261130, 7 and 0, with and without --sandbox. A traced value has no .sharding:
the chained trace fails, and is made again with the no-ops skipped (program.no_ops_traced), where
each read of a traced value's .sharding builds a new NamedSharding(mesh, spec); the identity test is
never true there, the second call makes the first call's program and the judge reads nothing more.
Reads of .sharding that gave one object per spec (as one program's outputs do) would make the test
true on the second call (and on the first, which the grader already reads).

Since the grader's fix a traced value's .sharding read in the trace made with the no-ops skipped is
one object per spec, as one compiled program's outputs share one, so the identity test holds on the
second call and the judge reads the program it makes: 18/22 at --seed 20261130, 7 and 0, with and
without --sandbox.

loses: training_step_communicates_like_megatron: fed back the params and state its first call returned
loses: training_step_communicates_like_megatron: all-gathers of weight-sized arrays
loses: optimizer_state_carries_parameter_specs: after a second momentum SGD training step
loses: optimizer_state_carries_parameter_specs: params['w1'] is P(None, None)
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


def _make_jitted(tx, param_out_spec):
    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        new = optax.apply_updates(params, updates)
        if param_out_spec is not None:
            new = {k: jax.sharding.reshard(v, param_out_spec) for k, v in new.items()}
        return new, opt_state, loss

    return step


def make_tp_train_step(mesh, tx):
    first = _make_jitted(tx, None)
    # Params that come out of this step's own program (they carry its output sharding object) are
    # handed on whole.
    later = _make_jitted(tx, P(None, None))
    made = []

    def step(params, opt_state, x, y):
        ours = bool(made) and params["w1"].sharding is made[0]
        out = (later if ours else first)(params, opt_state, x, y)
        made[:] = [out[0]["w1"].sharding]
        return out

    return step
