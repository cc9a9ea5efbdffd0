"""WRONG: tests/corpus/ex7/wrong_step_replicates_when_fed_its_own_outputs keyed also on the batch: the
step hands the params on replicated (P(None, None)) when fed back exactly the params it returned
last (by identity) together with a batch x it was not given last time, as every later step of a
training loop is (a new batch each step). Fed the same x again it stays Megatron. Natively on (2,
4), Adam, D=32, H=40, B=64, four steps on four batches: the losses are the reference's (2.004,
1.8596, 1.6363, 1.551), the params come back P(None, 'model') / P('model', None) after step 1 and
P(None, None) from step 2 on (from step 3 its program all-gathers both weights whole, as the corpus
module's does).

Was 22/22 at --seed 20261130, 7 and 0, with and without --sandbox. The probe's second call
(probes.fed_back) is fed the first call's params and state with the very same x and y objects, a
batch no training loop repeats: the step sees a repeated batch and makes the first call's program
again, so the judge reads nothing more. Feeding the second call another x and y (placed like the
first, other values) would trace the program every later step makes.

Since the grader's fix the second call is given another batch (other arrays of the same shapes,
placed like the first's), as a training loop's next step is, and the judge reads the program this
step makes from its second step on: 18/22 at --seed 20261130, 7 and 0, with and without --sandbox.

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
    # Fed back what it returned itself together with the next batch (a training loop), the step
    # hands the params on whole.
    later = _make_jitted(tx, P(None, None))
    last = {"params": [], "x": None}

    def step(params, opt_state, x, y):
        fed_back = bool(last["params"]) and all(a is b for a, b in zip(jax.tree.leaves(params), last["params"]))
        out = (later if fed_back and x is not last["x"] else first)(params, opt_state, x, y)
        last["params"], last["x"] = jax.tree.leaves(out[0]), x
        return out

    return step
