"""Right: shard_map with check_vma=False, where differentiating the replicated parameters gives
each device its own gradient (no psum added), the hidden size read with lax.axis_size, and the
gradients averaged before they are scattered.
"""
import jax
from jax import lax
from jax.sharding import PartitionSpec as P

from reference.ex9_zero1_adamw import (  # noqa: F401  right as they are
    adamw_step, decay_mask, init_params, init_zero1_state, loss, make_mesh, mlp, split_axis, zero1_spec,
)


def make_zero1_step(mesh, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=1e-2):
    n = mesh.shape["data"]

    def local(params, blocks, state, x, y):
        size = lax.axis_size("data")
        value, grads = jax.value_and_grad(loss)(params, x, y)

        def reduce(g):
            axis = split_axis(g.shape, size)
            g = g / size
            return lax.psum(g, "data") if axis is None else lax.psum_scatter(g, "data", scatter_dimension=axis, tiled=True)

        blocks, state = adamw_step(blocks, jax.tree.map(reduce, grads), state, lr, b1, b2, eps, wd, decay_mask(params))
        new = jax.tree.map(lambda b, p: b if b.shape == p.shape else
                           lax.all_gather(b, "data", axis=split_axis(p.shape, size), tiled=True), blocks, params)
        return new, state, lax.pmean(value, "data")

    @jax.jit
    def step(params, state, x, y):
        specs = jax.tree.map(lambda p: zero1_spec(p.shape, n), params)
        state_specs = {"mu": specs, "nu": specs, "count": P()}
        run = jax.shard_map(local, mesh=mesh, in_specs=(P(), specs, state_specs, P("data"), P("data")),
                            out_specs=(P(), state_specs, P()), check_vma=False)
        return run(params, jax.tree.map(jax.reshard, params, specs), state, x, y)

    return step
