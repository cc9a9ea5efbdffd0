"""RIGHT: the reference's jitted step inside a wrapper that keeps the loss each call returns and reads
it as a Python float at the start of the next call (logging it then, when it has long been computed,
so the host never waits on the step it has just dispatched): a common training-loop idiom. Natively
on (2, 4), Adam, D=32, H=40, B=64: the reference's losses (2.004, 1.8596, 1.6363, 1.551) and
placements, step.history holding the logged losses.

Was 15/22 at --seed 20261130, 7 and 0, with and without --sandbox (22/22 on main, which traces the
step once per probe). The probe now traces two chained calls in one trace (probes.fed_back): the
second call's float() of the first call's traced loss raises ConcretizationTypeError, and the judge
fails every step check but the state check with "your training step failed when fed back the params
and state it had returned ... keep no state between calls" (sgd/adam training, jitted, communicates,
share of the work: 7 points). Python that only a concrete value supports, run on the previous call's
results, fails only in the grader's trace; an error of the chained trace that the single call does
not raise (where the eager calls would not fail) could leave the second call unread instead of
failing the step.

Full marks (22/22 at --seed 20261130, 7 and 0, with and without --sandbox) since the grader's fix:
where both traces of the chained calls fail only as a trace does (a concretization error), the
second call is left unread, as when it makes the first call's program. Since a later fix that
second call is read after a first call run for real (probes.after_a_real_first_call: float() then
reads a number), and it is the first call's program: still full marks.
"""
import logging

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


log = logging.getLogger(__name__)


def make_tp_train_step(mesh, tx, log_every=1):
    @jax.jit
    def jitted(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    pending = []  # the last step's loss, read on the next call (by then it is computed: no stall)
    history = []

    def step(params, opt_state, x, y):
        if pending:
            history.append(float(pending.pop()))
            if len(history) % log_every == 0:
                log.info("step %d loss %.6f", len(history), history[-1])
        out = jitted(params, opt_state, x, y)
        pending.append(out[2])
        return out

    step.history = history
    return step
