"""RIGHT: init_tp_state places the parameters with jax.device_put on
NamedSharding, builds the optimizer state from the host arrays, then moves every parameter-shaped
leaf of the state to its parameter's sharding with optax.tree_map_params(tx, lambda s, p:
jax.device_put(s, p.sharding), state, placed) (the way one reshards a state restored from a
checkpoint).

Natively right on (2, 4) with Adam and (4, 2) with momentum SGD (params and moments on their
specs, training as the reference). Graded: optimizer_state_carries_parameter_specs lost with "your
code raised AttributeError: The 'sharding' attribute is not available on traced array": the judge
traces init_tp_state (its params tracers, or the host arrays as constants whose device_put results
are tracers too), and `.sharding` of a placed array, which is fine on the eager call init_tp_state
is documented to be, does not exist in a trace; no attempt keeps the placed params concrete.
Since the grader's fix, where nothing else traces, a value the trace placed on a NamedSharding of a mesh
answers `.sharding` with that sharding, as the eager call's array does
(program.single_device_arrays_assembled).

Scores (--seed 20261130 and --seed 7): without --sandbox 22/22, with --sandbox 22/22 (20/22 in
both modes before the grader's fix). Should get 22/22.
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
    state = tx.init({k: jnp.asarray(v) for k, v in params.items()})
    state = optax.tree_map_params(tx, lambda s, p: jax.device_put(s, p.sharding), state, placed)
    return placed, state


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
