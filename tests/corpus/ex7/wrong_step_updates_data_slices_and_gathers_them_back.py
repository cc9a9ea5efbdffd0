"""WRONG: a Megatron step whose optimizer update runs on each device's block cut further over
"data" (w1's as P("data", "model"), w2's as P("model", "data"): each data replica updates only its
slice of the gradients, params and moments it already holds whole), after which the new params
and moments are put back on their specs by a final reshard, i.e. all-gathered over "data". The
outputs land where they came in, the values are the reference's; the gradients are still summed
over "data" whole, so the gathers are traffic Megatron's step does not have: the grader's
compilation of its momentum-SGD step on (4, 2) at --seed 20261130 (D=16, H=40, B=48) holds 4
all-gathers (of the (20, 16) and (16, 20) blocks of params and momenta, over "data") beside
Megatron's 2 all-reduces.

20/22 at --seed 20261130 and 7, with and without --sandbox.

loses: training_step_communicates_like_megatron: Yours also moves all-reduces and all-gathers of arrays of shape
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


# The update is computed on each device's block cut further over "data" (a slice of what it holds,
# so each data replica updates only its share), then the new params are put back where they came
# in: the blocks gathered over "data".
UPDATE_SPECS = {"w1": P("data", "model"), "w2": P("model", "data")}


def _make_jitted(tx):
    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        cut = lambda tree: {k: jax.sharding.reshard(v, UPDATE_SPECS[k]) for k, v in tree.items()}  # noqa: E731
        updates, opt_state = tx.update(cut(grads), opt_state, cut(params))
        new = optax.apply_updates(cut(params), updates)
        new = {k: jax.sharding.reshard(v, PARAM_SPECS[k]) for k, v in new.items()}
        back = lambda path, s: jax.sharding.reshard(s, PARAM_SPECS[path[-1].key]) if getattr(s, "ndim", 0) == 2 else s  # noqa: E731
        opt_state = jax.tree_util.tree_map_with_path(back, opt_state)
        return new, opt_state, loss

    return step


def make_tp_train_step(mesh, tx):
    return _make_jitted(tx)
