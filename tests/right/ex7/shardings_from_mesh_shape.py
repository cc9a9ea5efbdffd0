"""Right: the step's shardings are built from mesh.shape: every spec drops the mesh axes that hold
one device (P(None, None) for w1 on (8, 1), P(None, None) for x on (1, 8): the same placement),
and the step is jax.jit(step, in_shardings=..., out_shardings=...) with those shardings (the
params' and the batch's; the loss P()). Should get 22/22 on every mesh, the one-axis ones
included.
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
    h = jax.nn.relu(x @ w1)  # column parallel: each device's own hidden units
    return jnp.matmul(h, w2, out_sharding=X_SPEC)  # row parallel: one all-reduce over "model"


def _tp_mlp_local(w1_blk, w2_blk, x_blk):
    return lax.psum(jax.nn.relu(x_blk @ w1_blk) @ w2_blk, "model")


def make_tp_mlp_shard_map(mesh):
    return jax.shard_map(_tp_mlp_local, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC), out_specs=X_SPEC)


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    return placed, tx.init(placed)


def _spec_on(mesh, spec):
    """spec without the mesh axes that hold one device (a split into one block is no split)."""
    return P(*(a if a is not None and mesh.shape[a] > 1 else None for a in spec))


def make_tp_train_step(mesh, tx):
    params_s = {k: NamedSharding(mesh, _spec_on(mesh, s)) for k, s in PARAM_SPECS.items()}
    batch_s = NamedSharding(mesh, _spec_on(mesh, X_SPEC))

    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return jax.jit(step, in_shardings=(params_s, None, batch_s, batch_s),
                   out_shardings=(params_s, None, NamedSharding(mesh, P())))
