"""WRONG: the reference's step, in a wrapper that keeps each call's batch x and hands it to the next
call, whose jitted step adds 0.0 * mean(previous x) to the loss it returns (a number that changes
nothing) and, fed back the very params it returned, hands them on replicated (P(None, None)).
Natively on (4, 2), momentum SGD: P(None, 'model') / P('model', None) after step 1,
P(None, None) from step 2 on.

Was 22/22 with and without --sandbox at seeds 20261130, 7 and 0: the second call reads an array
the first call was given (its x), so probes.second_call could not cut it out of the chained trace
("its second call reads the arrays its first call was given") and the judge read nothing of it.
Any harmless read of a previous input hid the later program this way.

Since the grader's fix such a second call is read after a first call run for real
(probes.after_a_real_first_call): traced alone, fed the very arrays the first returned, the batch
the wrapper kept a constant of its program; the judge compiles and reads it. 18/22 with and
without --sandbox at seeds 20261130, 7 and 0, as
tests/corpus/ex7/wrong_step_replicates_when_fed_its_own_outputs.py.

loses: training_step_communicates_like_megatron: fed back the params and state its first call returned
loses: optimizer_state_carries_parameter_specs: after a second momentum SGD training step
loses: optimizer_state_carries_parameter_specs: params['w1'] is P(None, None)
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


def _make_jitted(tx, param_out_spec):
    @jax.jit
    def step(params, opt_state, x, y, x_before):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        new = optax.apply_updates(params, updates)
        if param_out_spec is not None:
            new = {k: jax.sharding.reshard(v, param_out_spec) for k, v in new.items()}
        return new, opt_state, loss + 0.0 * jnp.mean(x_before)

    return step


def make_tp_train_step(mesh, tx):
    first = _make_jitted(tx, None)
    later = _make_jitted(tx, P(None, None))  # fed back its own outputs, it hands the params on whole
    returned, batch = [], []

    def step(params, opt_state, x, y):
        fed_back = bool(returned) and all(a is b for a, b in zip(jax.tree.leaves(params), returned))
        new, opt_state, loss = (later if fed_back else first)(params, opt_state, x, y, batch[0] if batch else x)
        returned[:], batch[:] = jax.tree.leaves(new), [x]
        return new, opt_state, loss

    return step
