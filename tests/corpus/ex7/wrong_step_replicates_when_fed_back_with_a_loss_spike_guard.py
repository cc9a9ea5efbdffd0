"""WRONG: tests/corpus/ex7/wrong_step_replicates_when_fed_its_own_outputs with a loss-spike guard: the
jitted step also takes the loss the last call returned and skips the update (scales it by 0) where
the new loss is a hundred times that; fed back exactly the params it returned last (by identity) it
hands them on replicated (P(None, None)). Natively on (2, 4), Adam, D=32, H=40, B=64: the
reference's losses (2.004, 1.8596, 1.6363, 1.551; no spike), the params P(None, 'model') /
P('model', None) after step 1 and P(None, None) from step 2 on.

Was 22/22 at --seed 20261130, 7 and 0, with and without --sandbox. The loss is one of the values the
step returns, but probes.second_call takes only the params and state as the second call's inputs: a
second call that reads the first's loss is "no function of those alone" and is not read ("its second
call reads values its first call computed and did not return", though it did return it). Taking
every value the first call returned (the loss too) as an input of the cut would read this one.

Since the grader's fix every value the first call returned (the loss too) may be an input of the
cut, the loss one only where the second call reads it, and the judge feeds it the loss its own run
of the first call returned: 18/22 at --seed 20261130, 7 and 0, with and without --sandbox.

loses: training_step_communicates_like_megatron: fed back the params and state its first call returned
loses: training_step_communicates_like_megatron: all-gathers of weight-sized arrays
loses: optimizer_state_carries_parameter_specs: after a second momentum SGD training step
loses: optimizer_state_carries_parameter_specs: params['w1'] is P(None, None)
"""
import math
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
    def step(params, opt_state, x, y, last_loss):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        # A loss spike (a hundred times the last step's) skips the update.
        keep = jnp.where(loss > 100.0 * last_loss, 0.0, 1.0)
        new = optax.apply_updates(params, jax.tree.map(lambda u: u * keep, updates))
        if param_out_spec is not None:
            new = {k: jax.sharding.reshard(v, param_out_spec) for k, v in new.items()}
        return new, opt_state, loss

    return step


def make_tp_train_step(mesh, tx):
    first = _make_jitted(tx, None)
    # Fed back what it returned itself (a training loop), the step hands the params on whole.
    later = _make_jitted(tx, P(None, None))
    returned = []
    last = [math.inf]

    def step(params, opt_state, x, y):
        fed_back = bool(returned) and all(a is b for a, b in zip(jax.tree.leaves(params), returned))
        out = (later if fed_back else first)(params, opt_state, x, y, last[0])
        returned[:] = jax.tree.leaves(out[0])
        last[0] = out[2]
        return out

    return step
