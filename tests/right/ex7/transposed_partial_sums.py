"""Right: another order of the same operations. The shard_map body computes the transposed partial
sums (D, B/data) = w2_blk.T @ relu(w1_blk.T @ x_blk.T), adds them with one psum and transposes
back; the step takes jax.grad with the loss as its aux, reduces the loss over the batch before
the features, and adds the updates itself."""
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def tp_mlp(w1, w2, x):
    pre = jnp.matmul(x, w1)
    return jnp.matmul(jnp.where(pre > 0, pre, 0.0), w2, out_sharding=P("data", None))


def _local(w1_blk, w2_blk, x_blk):
    partial_t = w2_blk.T @ jax.nn.relu(w1_blk.T @ x_blk.T)
    return lax.psum(partial_t, "model").T


def make_tp_mlp_shard_map(mesh):
    return jax.shard_map(_local, mesh=mesh, in_specs=(P(None, "model"), P("model", None), P("data", None)),
                         out_specs=P("data", None))


def init_tp_state(mesh, tx, params):
    placed = {}
    for name, spec in (("w2", P("model", None)), ("w1", P(None, "model"))):
        placed[name] = jax.device_put(jnp.asarray(params[name]), NamedSharding(mesh, spec))
    return placed, tx.init(placed)


def make_tp_train_step(mesh, tx):
    def loss_and_aux(params, x, y):
        err = y - tp_mlp(params["w1"], params["w2"], x)
        loss = jnp.mean(jnp.mean(err * err, axis=0))  # over the batch first: a (D,) vector added over "data"
        return loss, loss

    def step(params, opt_state, x, y):
        grads, loss = jax.grad(loss_and_aux, has_aux=True)(params, x, y)
        updates, new_state = tx.update(grads, opt_state, params)
        new_params = jax.tree.map(lambda p, u: p + u, params, updates)
        return new_params, new_state, loss

    return jax.jit(step)
