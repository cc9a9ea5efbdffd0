"""RIGHT: the reference's jitted step, also taking and returning an exponential moving average of
the params (0.99 ema + 0.01 new, on the device, placed as the params) that the Python wrapper keeps
in a dict of its closure between calls, with the last loss, and never hands the caller. Natively
the reference's losses and placements. Full marks: its second call reads the average the first
call left (a value the step computed and did not return); the grader reads that call after a first
call run for real, the average a constant of its program at the value that call left, and it is
the same Megatron step.
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


def _make_jitted(tx):
    @jax.jit
    def step(params, opt_state, x, y, ema):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        new = optax.apply_updates(params, updates)
        ema = jax.tree.map(lambda e, p: 0.99 * e + 0.01 * p, ema, new)
        return new, opt_state, loss, ema

    return step


def make_tp_train_step(mesh, tx):
    jitted = _make_jitted(tx)
    kept = {}

    def step(params, opt_state, x, y):
        if "ema" not in kept:
            kept["ema"] = jax.tree.map(jnp.copy, params)
        new, opt_state, loss, kept["ema"] = jitted(params, opt_state, x, y, kept["ema"])
        kept["last_loss"] = loss
        return new, opt_state, loss

    step.kept = kept
    return step
