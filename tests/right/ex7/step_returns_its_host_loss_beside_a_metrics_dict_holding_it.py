"""RIGHT: the jitted step also returns metrics = {"loss": loss, ...}, which the wrapper appends to a
module-level list, and the step returns np.asarray(loss), a host array.

Full marks. It scored 20/22: two arrays of the recorded call had the loss's bits, so the host loss
was read as a constant ("got [3.661, 3.22, 3.22, 3.22, ...]"). Now a host number is read as the
array it copies where every match comes from one equation (program._copied_from): the jitted call
returns the loss twice.
"""
import numpy as np
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



METRICS = []  # the run's metrics, one dict of device scalars per step


def make_tp_train_step(mesh, tx):
    @jax.jit
    def jitted(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        metrics = {"loss": loss, "grad_norm": optax.global_norm(grads)}
        return optax.apply_updates(params, updates), opt_state, loss, metrics

    def step(params, opt_state, x, y):
        new_params, new_state, loss, metrics = jitted(params, opt_state, x, y)
        METRICS.append(metrics)
        return new_params, new_state, np.asarray(loss)

    return step
