"""WRONG: the reference's step with a step decay of its own on top of tx, counted on the device: the
jitted step takes and returns a scalar int32 `t` (steps taken) that the Python wrapper holds between
calls (as tests/right/ex7/step_carries_a_device_step_counter.py), and multiplies every update by
0.5 ** (t // 2). Its first two steps are tx's; from the third on every update is halved (then
quartered, ...), so it does not train as tx does. Natively on (2, 4), Adam, D=16, H=32, B=32, a new
batch each step: losses 2.2639, 1.8291, 1.6652, 1.6107, 1.6554 where the reference's are 2.2639,
1.8291, 1.6652, 1.5382, 1.5481. Placements and collectives are Megatron's.

Scores 22/22 at --seed 20261130, 7 and 0, with and without --sandbox (22/22 on main too); 21/22 since
the values a real first call left travel as inputs: with Adam the counter equals Adam's own count
and is read as that input, so it advances in the replay (adam_training_matches_single_device lost).
Should lose sgd_training_matches_single_device and adam_training_matches_single_device: 20/22.

Why: the second call carries `t` (a value the first call's operations computed and did not return),
so the judge reads it after a first call run for real (probes.after_a_real_first_call), `t` a
constant of that program at the value the first call left (1), and replays that one program for
steps 2 to 5 of its training runs. In those runs `t` never passes 1 and the scale stays 1.0; the
learner's own third call has t = 2. The corpus module that stops training "when fed back" is caught
because it acts from t = 1; any schedule acting from t = 2 is not. Unlike
open/ex7/wrong_step_goes_replicated_later (Python state), the value that changes is a device array
the second call's own program computes from and returns to the wrapper.
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
    def jitted(params, opt_state, x, y, t):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        # A step decay counted on the device, on top of tx: halved every two steps.
        scale = 0.5 ** (t // 2).astype(jnp.float32)
        updates = jax.tree.map(lambda u: u * scale, updates)
        return optax.apply_updates(params, updates), opt_state, loss, t + 1

    counter = [jnp.zeros((), jnp.int32)]  # steps taken, kept on the device

    def step(params, opt_state, x, y):
        new, opt_state, loss, counter[0] = jitted(params, opt_state, x, y, counter[0])
        return new, opt_state, loss

    return step
