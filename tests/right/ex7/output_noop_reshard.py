"""RIGHT (arguable): tp_mlp ends with jax.sharding.reshard(y, P("data", None)) on a y whose
second matmul already stated out_sharding=P("data", None): a reshard to the sharding it has, no
data moved (the compiled forward holds one all-reduce). The second matmul's out_sharding is given
as a NamedSharding on the abstract mesh (jax.sharding.get_abstract_mesh()). Everything else is
the reference. A grader reading the technique should give 22/22; one reading "returns the second
matmul itself" literally may take tp_mlp_states_the_output_sharding.

Scores (--seed 276678, main mesh (2, 4)): without --sandbox 20/22, with --sandbox 20/22; verbose
output identical in both modes. Expected: 22/22.

Since a reshard to the sharding the value's type already has is looked through when the judge reads what makes
the output: 22/22 at seed 276678, with and without --sandbox.
"""
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding, reshard
from jax.sharding import PartitionSpec as P

W1_SPEC, W2_SPEC, X_SPEC = P(None, "model"), P("model", None), P("data", None)
PARAM_SPECS = {"w1": W1_SPEC, "w2": W2_SPEC}


def tp_mlp(w1, w2, x):
    rows = NamedSharding(jax.sharding.get_abstract_mesh(), X_SPEC)
    y = jnp.matmul(jax.nn.relu(x @ w1), w2, out_sharding=rows)
    return reshard(y, X_SPEC)
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
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
