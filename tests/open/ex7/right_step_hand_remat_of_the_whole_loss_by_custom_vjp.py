"""Right: rematerialisation of the whole loss by hand, without jax.checkpoint: a jax.custom_vjp whose
forward keeps only its inputs (params, x, y) and whose backward recomputes the loss with jax.vjp
(the inputs through lax.optimization_barrier, so that XLA recomputes rather than reusing the first
forward's values, which is the memory saving). It is what jax.checkpoint(_loss) does
(tests/right/ex7/remat_whole_loss.py, full marks), written out; the values are the reference's.

18/22 with and without --sandbox at seeds 20261130, 7 and 0: training_step_communicates_like_megatron
("Yours also moves all-reduces of arrays of shape (12, 16) (over 'model' ...": the recomputed
forward's psum) and each_device_does_its_share_of_the_work (1.32-1.39x the grader's own Megatron
step, above OWN_STEP_SLACK = 1.25), since only a differentiated jax.checkpoint earns the remat
allowances. Should be 22/22 if hand remat counts as remat. Its compiled program does the same work
as tests/open/ex7/wrong_step_forward_twice_beside_a_differentiated_checkpoint_saving_everything.py
(22/22, 1.32-1.39x), so the marker the judge reads (a differentiated checkpoint) lets the wrong one
through and stops this one: whether the work is recomputation is a fact of where the second
forward's values go (into the backward here, into the returned loss there), not of the marker.
"""
import functools
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


def init_tp_state(mesh, tx, params):
    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    return placed, tx.init(placed)


def _loss(params, x, y):
    return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)


@jax.custom_vjp
def _remat_loss(params, x, y):
    return _loss(params, x, y)


def _remat_loss_fwd(params, x, y):
    return _loss(params, x, y), (params, x, y)  # keep the inputs only: no activations held


def _remat_loss_bwd(res, g):
    # The whole loss recomputed in the backward (the barrier keeps XLA from reusing the first
    # forward's values, as a memory-saving remat must), then the cotangent pulled back.
    _, vjp = jax.vjp(_loss, *lax.optimization_barrier(res))
    return vjp(g)


_remat_loss.defvjp(_remat_loss_fwd, _remat_loss_bwd)


def make_tp_train_step(mesh, tx):
    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(_remat_loss)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
