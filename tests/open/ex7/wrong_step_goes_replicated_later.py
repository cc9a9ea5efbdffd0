"""WRONG: the step goes replicated after its first calls. make_tp_train_step returns a plain function (as tests/right/ex7/callable_class_step.py does) that calls a jitted Megatron step for its first 3 calls and, from then on, a jitted step that gathers every weight, moment and the batch and runs the whole update on every device (putting the results back on their specs). The grader traces each step it is given at most twice and runs that program itself, so it never meets the replicated one; a training loop runs it from step 4 on. Should lose training_step_communicates_like_megatron and each_device_does_its_share_of_the_work (4): expected at most 18/22.

Scores (--seed 276678, main mesh (2, 4)): without --sandbox 22/22, with --sandbox 22/22; verbose
output identical in both modes. Expected: 18/22 (as tests/right or tests/corpus (red-team control) wrong_step_always_replicated.py).
"""
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding, reshard
from jax.sharding import PartitionSpec as P

W1_SPEC, W2_SPEC, X_SPEC = P(None, "model"), P("model", None), P("data", None)
PARAM_SPECS = {"w1": W1_SPEC, "w2": W2_SPEC}


def _megatron(w1, w2, x):
    return jnp.matmul(jax.nn.relu(x @ w1), w2, out_sharding=X_SPEC)


def _replicated(w1, w2, x):
    w1, w2, x = (reshard(a, P()) for a in (w1, w2, x))
    return reshard(jax.nn.relu(x @ w1) @ w2, X_SPEC)


def tp_mlp(w1, w2, x):
    return _replicated(w1, w2, x) if _gate(w1, x) else _megatron(w1, w2, x)


def _local(w1, w2, x):
    return lax.psum(jax.nn.relu(x @ w1) @ w2, "model")


def _whole(w1, w2, x):
    return jax.nn.relu(x @ w1) @ w2


def make_tp_mlp_shard_map(mesh):
    megatron = jax.shard_map(_local, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC)
    whole = jax.shard_map(_whole, mesh=mesh, in_specs=(P(), P(), P()), out_specs=P())

    def f(w1, w2, x):
        if _gate(w1, x):
            return reshard(whole(*(reshard(a, P()) for a in (w1, w2, x))), X_SPEC)
        return megatron(w1, w2, x)
    return f


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    return placed, tx.init(placed)


def _gate(w1, x):
    return False


def _steps(tx):
    def loss_fn(params, x, y):
        return jnp.mean((_megatron(params["w1"], params["w2"], x) - y) ** 2)

    @jax.jit
    def megatron(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    @jax.jit
    def replicated(params, opt_state, x, y):
        specs = jax.tree.map(lambda a: jax.typeof(a).sharding.spec, (params, opt_state))
        params, opt_state, x, y = jax.tree.map(lambda a: reshard(a, P()), (params, opt_state, x, y))
        loss, grads = jax.value_and_grad(
            lambda p: jnp.mean((jax.nn.relu(x @ p["w1"]) @ p["w2"] - y) ** 2))(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        params, opt_state = jax.tree.map(lambda a, s: reshard(a, s), (params, opt_state), specs)
        return params, opt_state, loss
    return megatron, replicated


def make_tp_train_step(mesh, tx):
    megatron, replicated = _steps(tx)
    calls = [0]

    def step(params, opt_state, x, y):
        calls[0] += 1
        return (megatron if calls[0] <= 3 else replicated)(params, opt_state, x, y)
    return step
