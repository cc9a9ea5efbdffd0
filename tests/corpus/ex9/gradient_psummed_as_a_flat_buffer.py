"""shard_map, the weight matrices' gradients as flat buffers: each raveled, summed whole with
lax.psum, reshaped, and each device slices its own block; the vectors are reduce-scattered. The
psum's operand is a flat vector, not the parameter's shape, but it is a whole gradient all the
same. Every number is right.

loses: gradients_are_not_summed_whole: whole, in another shape
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

        def local(params, state, x, y):
            value, grads = jax.value_and_grad(loss)(lax.pcast(params, "data", to="varying"), x, y)
            i = lax.axis_index("data")

            def block(a, axis):
                if axis is None:
                    return a
                k = a.shape[axis] // n
                return lax.dynamic_slice_in_dim(a, i * k, k, axis=axis)

            def reduce(g, axis):
                if axis is None:
                    return lax.psum(g, "data") / n
                if g.ndim == 1:
                    return lax.psum_scatter(g, "data", scatter_dimension=0, tiled=True) / n
                return block((lax.psum(g.ravel(), "data") / n).reshape(g.shape), axis)

            grads = jax.tree.map(reduce, grads, axes)
            blocks = jax.tree.map(block, params, axes)
            blocks, state = adamw_step(blocks, grads, state, lr, b1, b2, eps, wd, mask)
            new = jax.tree.map(lambda b, axis: b if axis is None else
                               lax.all_gather(b, "data", axis=axis, tiled=True, to="invarying"), blocks, axes)
            return new, state, lax.pmean(value, "data")

        return jax.shard_map(local, mesh=mesh, in_specs=(P(), state_specs, P("data"), P("data")),
                             out_specs=(P(), state_specs, P()))(params, state, x, y)

    return step
