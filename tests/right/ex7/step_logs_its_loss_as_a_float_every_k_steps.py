"""RIGHT: the reference's jitted step in a wrapper that records float(loss) on every 10th call,
counting from call 0 (a common logging idiom inside a step function; it waits for that step's
loss, the values are untouched). Natively the reference's losses and placements, step.history
holding the logged floats.

Full marks. It scored 13/22 (every step check said "your code raised ConcretizationTypeError ...
the `float` function") while the first call was only ever traced: Python that reads the current
call's loss as a number fails in a trace. Now, where both of the step's traces fail only as a
trace does, the first call of a step made afresh is run for real and the primitives it binds are
its program (probes.step_read, program.recorded_call).
"""
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

W1_SPEC = P(None, "model")  # column split: each device owns H/model hidden units
W2_SPEC = P("model", None)  # row split: the same hidden units' rows of w2
X_SPEC = P("data", None)    # the batch split over "data"; also the output's spec
PARAM_SPECS = {"w1": W1_SPEC, "w2": W2_SPEC}


def tp_mlp(w1, w2, x):
    h = jax.nn.relu(x @ w1)  # column parallel: each device's own hidden units, no communication
    # Row parallel: the contracting dim is split, so the partial sums are added by one all-reduce;
    # on Explicit axes JAX asks where the sum should live.
    return jnp.matmul(h, w2, out_sharding=X_SPEC)


def _tp_mlp_local(w1_blk, w2_blk, x_blk):
    partial = jax.nn.relu(x_blk @ w1_blk) @ w2_blk  # (B/data, D): this device's share of the sum
    return lax.psum(partial, "model")


def make_tp_mlp_shard_map(mesh):
    return jax.shard_map(_tp_mlp_local, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC)


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    # The moments are zeros_like(params): made from the placed params, they inherit their split.
    return placed, tx.init(placed)


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)



def make_tp_train_step(mesh, tx):
    @jax.jit
    def jitted(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    calls = [0]
    history = []

    def step(params, opt_state, x, y):
        out = jitted(params, opt_state, x, y)
        if calls[0] % 10 == 0:
            history.append(float(out[2]))
        calls[0] += 1
        return out

    step.history = history
    return step
