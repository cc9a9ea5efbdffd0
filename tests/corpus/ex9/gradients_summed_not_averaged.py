"""shard_map: the gradients psum_scatter'd but never divided by the number of devices, so they are
N times the gradient of the batch mean. AdamW's step hardly notices (it divides m_hat by
sqrt(v_hat)), its moments do.

loses: zero1_training_matches_single_device: times too large
"""
import jax
from jax import lax
from jax.sharding import PartitionSpec as P

from reference.ex9_zero1_adamw import (  # noqa: F401  right as they are
    adamw_step, decay_mask, init_params, init_zero1_state, loss, make_mesh, mlp, split_axis, zero1_spec,
)


def make_zero1_step(mesh, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=1e-2):
    n = mesh.shape["data"]

    @jax.jit
    def step(params, state, x, y):
        axes = jax.tree.map(lambda p: split_axis(p.shape, n), params)
        specs = jax.tree.map(lambda p: zero1_spec(p.shape, n), params)
        state_specs = {"mu": specs, "nu": specs, "count": P()}
        mask = decay_mask(params)

        def local(params, blocks, state, x, y):
            value, grads = jax.value_and_grad(loss)(lax.pcast(params, "data", to="varying"), x, y)
            grads = jax.tree.map(lambda g, a: lax.psum(g, "data") if a is None else
                                 lax.psum_scatter(g, "data", scatter_dimension=a, tiled=True), grads, axes)
            blocks, state = adamw_step(blocks, grads, state, lr, b1, b2, eps, wd, mask)
            new = jax.tree.map(lambda b, a: b if a is None else
                               lax.all_gather(b, "data", axis=a, tiled=True, to="invarying"), blocks, axes)
            return new, state, lax.pmean(value, "data")

        blocks = jax.tree.map(jax.reshard, params, specs)
        return jax.shard_map(local, mesh=mesh, in_specs=(P(), specs, state_specs, P("data"), P("data")),
                             out_specs=(P(), state_specs, P()))(params, blocks, state, x, y)

    return step
