"""WRONG: the reference's step with a step counter kept on the device (a scalar int32 `t` the jitted
step takes and returns, held by the Python wrapper between calls, as
tests/corpus/ex7/wrong_step_replicates_when_fed_back_with_a_device_step_counter.py), whose wrapper,
fed back the very params it returned, dispatches a step that multiplies every update by 0.0: the
params stop moving after the first step (the momentum and the losses still computed, the
placements and collectives Megatron's). Natively it trains one step only.

Was 22/22 with and without --sandbox at seeds 20261130, 7 and 0: the judge read the fed-back
call's cut (the counter a hidden input, fed zeros) for its collectives, FLOPs and placements, all
right, but not its numbers: where a cut took hidden inputs the training runs replayed the first
call's program for every later step, which trains.

Since the grader's fix a second call that reads values its first call left is read after a first
call run for real (probes.after_a_real_first_call): traced alone, fed the very arrays the first
returned, the counter a constant at the value that call left; the judge replays that program as
the training runs' later steps and compares their numbers: 20/22 with and without --sandbox at
seeds 20261130, 7 and 0 (the losses from step 3 on are step 2's).

loses: sgd_training_matches_single_device: the 5 losses after 5 steps of momentum SGD
loses: adam_training_matches_single_device: the 5 losses after 5 steps of Adam
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


def _make_jitted(tx, scale):
    @jax.jit
    def step(params, opt_state, x, y, t):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        updates = jax.tree.map(lambda u: u * scale, updates)
        return optax.apply_updates(params, updates), opt_state, loss, t + 1

    return step


def make_tp_train_step(mesh, tx):
    first = _make_jitted(tx, 1.0)
    later = _make_jitted(tx, 0.0)  # fed back its own outputs, it no longer moves the params
    returned = []
    counter = [jnp.zeros((), jnp.int32)]  # steps taken, kept on the device for logging

    def step(params, opt_state, x, y):
        fed_back = bool(returned) and all(a is b for a, b in zip(jax.tree.leaves(params), returned))
        new, opt_state, loss, counter[0] = (later if fed_back else first)(params, opt_state, x, y, counter[0])
        returned[:] = jax.tree.leaves(new)
        return new, opt_state, loss

    return step
