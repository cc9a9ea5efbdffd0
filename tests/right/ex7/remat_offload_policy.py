"""Right: the reference's loss under jax.checkpoint with an offloading policy,
jax.checkpoint_policies.save_and_offload_only_these_names (the hidden activations, named by
checkpoint_name, moved to "pinned_host" memory in the forward and back for the backward; nothing
else saved). It trains as the reference does (the same losses to float32 rounding on a (2, 4) mesh
run by hand) and communicates like it: offloading moves memory, not work.

Was 13/22 with and without --sandbox at seeds 20261130, 7 and 0: the step's program holds its
residuals in host memory with their sharded type (f32<host>[B@data, H@model]), which the program
encoding refused ("a sharded value in memory MemorySpace.Host"), so every step check failed. Such
a value is now sent as its sharded type and its memory space, and rebuilt alike; the judge
compiles and runs the rebuilt step, the device_put to the host included.

Full marks: offloading is one of jax.checkpoint's policies, and the chapter's memory-for-compute
trade allows it. 22/22 with and without --sandbox at seeds 20261130, 7 and 0.
"""
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.ad_checkpoint import checkpoint_name
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


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    return placed, tx.init(placed)


# The hidden activations go to host memory in the forward and come back for the backward.
_POLICY = jax.checkpoint_policies.save_and_offload_only_these_names(
    names_which_can_be_saved=[], names_which_can_be_offloaded=["hidden"],
    offload_src="device", offload_dst="pinned_host")


def _loss(params, x, y):
    h = checkpoint_name(jax.nn.relu(x @ params["w1"]), "hidden")
    out = jnp.matmul(h, params["w2"], out_sharding=X_SPEC)
    return jnp.mean((out - y) ** 2)


def make_tp_train_step(mesh, tx):
    loss_fn = jax.checkpoint(_loss, policy=_POLICY)

    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
