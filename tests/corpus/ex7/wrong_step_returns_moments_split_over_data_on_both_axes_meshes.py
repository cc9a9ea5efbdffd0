"""WRONG: a Megatron step that returns the optimizer state's moments (momentum SGD's trace, Adam's
mu and nu) with specs other than those they came in with, on meshes where both axes are split: each
moment's block cut further over "data" (w1's as P("data", "model"), w2's as P("model", "data")), a
slice each device takes of what it holds, so the first step itself moves nothing. In a training
loop the next steps take the state as returned and must gather it back: natively on (4, 2), D=32,
H=40, B=64, momentum SGD or Adam, the program of the third call on holds 2 all-gathers of the
moments' blocks (32, 20) and (20, 32) beside Megatron's 2 all-reduces; the stub says "the returned
params and opt_state keep the specs they came in with", the check "a training step keeps them".

The state check steps from init_tp_state's output with Adam only, and only on (1, 8) and (8, 1)
(ADAM_STEP_MESHES), where this step returns the specs it was given; the SGD and Adam runs on the
both-axes meshes place each step's outputs back where the first step took them, and read the
first step's program only, so neither the returned specs nor the later steps' gathers are read.

Was 22/22 at seeds 20261130, 7 and 276678 in both modes. Since the grader's fix the state check
also reads where the first step of each training run (both axes split) puts its params and state
(the compiled program's own output placements): 20/22 in both modes at seeds 20261130 and 7. The
later steps' gathers are not read (the runs put each output back where the first step took it).

loses: optimizer_state_carries_parameter_specs: after one momentum SGD training step on a
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


# The moments as the step returns them where both axes are split: each block cut further over
# "data" (rows of w1's, columns of w2's), a slice each device takes of what it holds.
MOMENT_OUT_SPECS = {"w1": P("data", "model"), "w2": P("model", "data")}


def _moments_resplit(opt_state):
    def visit(path, leaf):
        last = path[-1] if path else None
        name = getattr(last, "key", None)
        if name in MOMENT_OUT_SPECS and getattr(leaf, "ndim", 0) == 2:
            return jax.sharding.reshard(leaf, MOMENT_OUT_SPECS[name])
        return leaf
    return jax.tree_util.tree_map_with_path(visit, opt_state)


def make_tp_train_step(mesh, tx):
    both_axes_split = mesh.shape["data"] > 1 and mesh.shape["model"] > 1

    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        if both_axes_split:
            opt_state = _moments_resplit(opt_state)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
