"""The forward's all-reduce written in its two halves (as a ring all-reduce runs, and as
sequence parallelism splits it): a shard_map computes each device's (B/data, D) partial sum and
psum_scatters it over "model" (out_specs P(("data", "model"), None): each device holds the sum of
its B/(data*model) rows), and the global view reshards the sums to P("data", None) (an all-gather
over "model") before the loss. The rest of the step is the global view's (value_and_grad,
tx.update, optax.apply_updates).

The forward moves exactly one all-reduce's worth over "model" (a reduce-scatter and an
all-gather, each half of it), but JAX's transpose of psum_scatter is an all-gather of the
cotangent, so the backward gathers a (B/data, D) array over "model" once more: at seed 20261130
on (4, 2) (D=16, H=40, B=48) 288 numbers over "model" where Megatron's step sums 192, and
training_step_communicates_like_megatron fails it over budget. A policy question: it is the
technique in the form sequence parallelism uses, with communication in the backward that
Megatron's psum avoids (the cotangent is already whole on every device of a "model" group).

Decided not Megatron's communication: it moves 1.5 times what Megatron's step moves over "model"
(the backward's gather is communication a psum does not need). 20/22 in both modes at seeds
20261130, 7 and 276678.

loses: training_step_communicates_like_megatron: over 'model'
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


def _scattered_sums(w1_blk, w2_blk, x_blk):
    partial = jax.nn.relu(x_blk @ w1_blk) @ w2_blk
    return lax.psum_scatter(partial, "model", scatter_dimension=0, tiled=True)


def make_tp_train_step(mesh, tx):
    fwd = jax.shard_map(_scattered_sums, mesh=mesh, in_specs=(W1_SPEC, W2_SPEC, X_SPEC),
                        out_specs=P(("data", "model"), None))

    def loss_fn(params, x, y):
        pred = jax.sharding.reshard(fwd(params["w1"], params["w2"], x), X_SPEC)
        return jnp.mean((pred - y) ** 2)

    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
