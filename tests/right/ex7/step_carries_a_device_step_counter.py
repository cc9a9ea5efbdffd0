"""RIGHT: the reference's jitted step, also taking and returning a scalar int32 `t` (steps taken,
for logging) that the Python wrapper keeps on the device between calls and never hands the caller.
Natively on (2, 4), Adam, D=32, H=40, B=64: the reference's losses (2.004, 1.8596, 1.6363, 1.551)
and placements, step.taken() the count. Full marks: its second call, fed back what the first
returned, reads the counter the first call made and did not return; the grader reads that call
after a first call run for real (probes.after_a_real_first_call), the counter a constant of its
program at the value the first call left, runs it as the training runs' later steps (their numbers
compared) and reads its collectives, FLOPs and placements: the same Megatron step.
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
    def step(params, opt_state, x, y, t):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, t + 1

    return step


def make_tp_train_step(mesh, tx):
    jitted = _make_jitted(tx)
    counter = [jnp.zeros((), jnp.int32)]  # steps taken, kept on the device for logging

    def step(params, opt_state, x, y):
        new, opt_state, loss, counter[0] = jitted(params, opt_state, x, y, counter[0])
        return new, opt_state, loss

    step.taken = lambda: int(counter[0])
    return step
