"""Right: shardings said to jit rather than only to the arrays. The shard_map version is returned
under jax.jit with in_shardings and out_shardings; tp_mlp pins h with with_sharding_constraint
(the sharding it has anyway) and spells the second matmul as an einsum with w2 first; the
parameters are placed by a jitted identity with out_shardings, the state by a jitted tx.init;
the step is jitted with in_shardings and out_shardings and constrains its gradients."""
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def tp_mlp(w1, w2, x):
    h = lax.with_sharding_constraint(jax.nn.relu(x @ w1), P("data", "model"))
    return jnp.einsum("hd,bh->bd", w2, h, out_sharding=P("data", None))


def _specs(mesh):
    return {"w1": NamedSharding(mesh, P(None, "model")), "w2": NamedSharding(mesh, P("model", None))}


def make_tp_mlp_shard_map(mesh):
    rows = NamedSharding(mesh, P("data", None))

    def local(w1_blk, w2_blk, x_blk):
        return lax.psum(jnp.einsum("hd,bh->bd", w2_blk, jax.nn.relu(jnp.einsum("dh,bd->bh", w1_blk, x_blk))), "model")

    f = jax.shard_map(local, mesh=mesh, in_specs=(P(None, "model"), P("model", None), P("data", None)),
                      out_specs=P("data", None))
    specs = _specs(mesh)
    return jax.jit(f, in_shardings=(specs["w1"], specs["w2"], rows), out_shardings=rows)


def init_tp_state(mesh, tx, params):
    specs = _specs(mesh)
    placed = jax.jit(lambda p: p, out_shardings=specs)({k: jnp.asarray(v) for k, v in params.items()})
    return placed, jax.jit(tx.init)(placed)


def make_tp_train_step(mesh, tx):
    specs = _specs(mesh)
    rows = NamedSharding(mesh, P("data", None))

    def loss_fn(params, x, y):
        return jnp.mean((tp_mlp(params["w1"], params["w2"], x) - y) ** 2)

    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        grads = lax.with_sharding_constraint(grads, specs)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return jax.jit(step, in_shardings=(specs, None, rows, rows), out_shardings=(specs, None, None))
