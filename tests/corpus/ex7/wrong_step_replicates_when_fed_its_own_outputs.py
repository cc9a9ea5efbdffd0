"""WRONG: a step that trains Megatron-style when given params it did not return, and hands the
params on replicated (P(None, None)) when fed back exactly the arrays it returned last (by
identity): in a training loop the first step is Megatron, every later one is not. Natively on
(2, 4), Adam, D=32, H=40, B=64 (same losses as the reference): the params come back on their
specs after step 1, P(None, None) from step 2 on, and from step 3 the step's program all-gathers
w1 (32, 40) and w2 (40, 32) whole and does 436,252 FLOPs a device (the reference: 119,498, 3.65x).

Was 22/22 at --seed 20261130, 7 and 276678, with and without --sandbox: the grader traced the
step once per (optimizer, mesh), always at fresh inputs (its own placement or init_tp_state's
output), and the judge then ran that one program for every step of its training runs, putting each
output back where the first step took it: it never handed the learner's step its own outputs, so
the later program was never made. Unlike tests/open/ex7/wrong_step_goes_replicated_later (a call
counter, beaten by any count), this is keyed on being fed its own outputs.

Since the grader's fix the probe also traces two chained calls of the step in one trace, the
second fed the very params and state the first returned, and cuts the second call's program out;
where it is not the first call's program the judge runs it as the training runs' later steps and
reads its collectives, FLOPs and output placements: 18/22 at --seed 20261130, 7 and 276678, with
and without --sandbox (the second call all-gathers both updated weights to return them P(None,
None); its FLOPs stay within a share, as the gathers compute nothing).

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
    # Fed back what it returned itself (a training loop), the step hands the params on whole.
    later = _make_jitted(tx, P(None, None))
    returned = []

    def step(params, opt_state, x, y):
        fed_back = bool(returned) and all(a is b for a, b in zip(jax.tree.leaves(params), returned))
        out = (later if fed_back else first)(params, opt_state, x, y)
        returned[:] = jax.tree.leaves(out[0])
        return out

    return step
