"""WRONG: tests/corpus/ex7/wrong_step_all_gathers_the_previous_params_when_fed_back (every call after the
first all-gathers the params of the call before whole onto every device, a drift metric added times 0.0),
with a ring of the last 64 losses kept on device (64 scalars made when the step is, a smoothed-loss metric
added times 0.0) passed to the later jit before the previous params. Every later call still moves both
whole weights between the devices (2 all-gathers in its compiled program).

Was 22/22 at --seed 20261130, 7 and 0, with and without --sandbox (the original lost
training_step_communicates_like_megatron, 20/22, and so did this module with a ring of 8, 62 or 63): the
second call is read after a real first call (probes.after_a_real_first_call), where at most 64 values the
first call left became inputs sent with their values; the 64 scalars took every slot, the previous params
were held as constants again, and XLA folded the all-gathers of constants away.

Since the grader's fix the largest values come in first, up to MAX_HIDDEN (1024), and with more than that
the reading after a real first call is not used at all (no value is held as a constant): 20/22 with and
without --sandbox at seeds 20261130, 7 and 0.

loses: training_step_communicates_like_megatron: Yours also moves all-gathers of weight-sized arrays
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



def _update(params, opt_state, x, y, tx):
    loss, grads = jax.value_and_grad(_loss)(params, x, y)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


RING = 64


def make_tp_train_step(mesh, tx):
    first = jax.jit(lambda p, s, x, y: _update(p, s, x, y, tx))

    @jax.jit
    def later(params, opt_state, x, y, ring, last):
        new, opt_state, loss = _update(params, opt_state, x, y, tx)
        # The params of the call before, gathered whole onto every device and split again: how far
        # two steps moved each weight (a metric; added times 0.0 to the loss returned).
        before = {k: jax.sharding.reshard(jax.sharding.reshard(v, P()), PARAM_SPECS[k]) for k, v in last.items()}
        drift = sum(jnp.sum((new[k] - before[k]) ** 2) for k in new)
        smoothed = sum(ring) / len(ring)  # the mean of the last losses (a metric)
        return new, opt_state, loss + 0.0 * drift + 0.0 * smoothed

    kept = {"ring": [jnp.zeros((), jnp.float32) + i * 0.0 for i in range(RING)]}  # the last RING losses

    def step(params, opt_state, x, y):
        out = later(params, opt_state, x, y, kept["ring"], kept["last"]) if "last" in kept else first(params, opt_state, x, y)
        kept["last"] = params  # the params this call was given
        return out

    return step
