"""WRONG: the reference's Megatron step while the loss it logs (float() of each call's loss, kept in
a Python list) is above 0.9 times the first call's; from the call after it falls below, a jitted
step that reshards the params, the optimizer state and the batch to P() (all-gathers), computes
the whole update on every device and splits the results back. Natively (a (2, 4) mesh, momentum
SGD at lr 0.1, D=16, H=24, B=40) the replicated jit runs from the fourth call on.

Scores (seeds 20261130, 7 and 0, with and without --sandbox): 22/22. Before the commit that records
a call which fails only as a trace does (a336610): 13/22, every step check lost to the trace's
ConcretizationTypeError. Should: 18/22, as the same module gathering from its first call scores
(training_step_communicates_like_megatron: 6 all-gathers; each_device_does_its_share_of_the_work:
7.26 times the grader's own Megatron step).

Why: float() of the loss sends the first call, and the second fed back what the first returned,
to be run for real and recorded (probes.step_read, program.recorded_call). A Python branch on a
value the call reads as a number is taken once, at the recorded call's values, and the judge's
training runs replay those two recorded programs for all five steps, so the branch is never
taken again with later losses. The class of ex7/wrong_step_goes_replicated_later (which program
a later call makes is the learner's Python state), here keyed on logged values, not a counter.
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

    losses = []  # every call's loss, logged as a float

    def step(params, opt_state, x, y):
        if losses and losses[-1] < 0.9 * losses[0]:
            out = replicated(params, opt_state, x, y)
        else:
            out = jitted(params, opt_state, x, y)
        losses.append(float(out[2]))
        return out

    step.losses = losses
    return step
