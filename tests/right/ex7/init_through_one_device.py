"""RIGHT: init_tp_state first copies each host array to the mesh's first
device (jax.device_put(v, device)), then places it Megatron-style from there
(jax.device_put(that, NamedSharding(mesh, spec))); tx.init of the placed params.

Natively right (specs, values and training as the reference on (2, 4) and (1, 8)). Graded:
optimizer_state_carries_parameter_specs lost with "the program of init_tp_state on a (2, 4) mesh
could not be read: your program holds a parameter of kind Device". The first trace succeeds (a
device_put to a Device is a device_put equation whose params hold the Device), so the attempt with
program.single_device_arrays_assembled (which would make that put a no-op) is never tried, and the
judge cannot decode the Device parameter. (tests/corpus/ex7/wrong_init_params_on_one_device.py
loses the same check with the same message, for the same reason, not its placement.) Since
the grader's fix a put on one device whose value is only ever placed again on a mesh is dropped from the
traced program (program.single_device_puts_dropped): the second put alone computes and places the
same; the corpus's params left on one device keep theirs and still lose.

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
    first = mesh.devices.flat[0]
    on_device = {k: jax.device_put(v, first) for k, v in params.items()}
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in on_device.items()}
    return placed, tx.init(placed)


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
