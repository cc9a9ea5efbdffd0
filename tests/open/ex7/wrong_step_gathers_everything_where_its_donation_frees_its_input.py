"""WRONG: each call logs float() of its loss and passes a small array of its own through a jit
that donates it; where the donated array is then deleted (every real call on CPU, as on GPU and
TPU), the step's results are replaced by those of a jitted step that reshards the params, the
optimizer state and the batch to P() (all-gathers) and computes the whole update on every
device. Natively (a (2, 4) mesh, momentum SGD) every call runs the replicated jit.

Scores (seeds 20261130, 7 and 0, with and without --sandbox): 22/22. Before the commit that records
a call which fails only as a trace does (a336610): 13/22 (the trace's ConcretizationTypeError).
Should: 18/22, as the same module gathering unconditionally scores.

Why: the call the grader records (program.recorded_call) runs every primitive with its donation
turned off, so that the grader's own arrays stay readable; the step sees its donated array
survive, which no real call does, and shows the Megatron step only there. The first call that
probes.after_a_real_first_call runs for real does take the replicated branch, but only its
returned arrays are read (placed as Megatron's). A wrapper that detects being read, as
ex7/wrong_sniffs_the_grader, through a behaviour of the recorder rather than the grader's names
(core.trace_state_clean() is False under the recorder too).
"""
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding, reshard
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

    @jax.jit
    def replicated(params, opt_state, x, y):
        # Everything gathered onto every device, the whole step on each, then split back.
        whole = lambda t: jax.tree.map(lambda a: reshard(a, P(*([None] * a.ndim))), t)
        specs = jax.tree.map(lambda a: a.aval.sharding.spec, (params, opt_state))
        p, s, xx, yy = whole((params, opt_state, x, y))
        loss, grads = jax.value_and_grad(lambda q: jnp.mean((jax.nn.relu(xx @ q["w1"]) @ q["w2"] - yy) ** 2))(p)
        updates, s = tx.update(grads, s, p)
        p = optax.apply_updates(p, updates)
        p, s = jax.tree.map(lambda a, sp: reshard(a, sp), (p, s), specs)
        return p, s, loss

    bump = jax.jit(lambda a: a + 1, donate_argnums=0)
    canary = []

    def step(params, opt_state, x, y):
        out = jitted(params, opt_state, x, y)
        step.losses.append(float(out[2]))
        if not canary:
            canary.append(jnp.zeros(8))
        held = canary.pop()
        canary.append(bump(held))
        if held.is_deleted():  # donation freed it: a real call
            out = replicated(params, opt_state, x, y)
        return out

    step.losses = []
    return step
