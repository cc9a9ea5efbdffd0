"""shard_map differentiating the replicated parameters as they arrive: JAX sums their gradient
whole across devices (the transpose of making them varying is a psum), and the step then keeps a
slice of it. Every number is right.

loses: gradients_are_not_summed_whole: JAX adds such a psum for you
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
            value, grads = jax.value_and_grad(loss)(params, x, y)  # already summed over "data"
            i = lax.axis_index("data")

            def block(g, axis):
                g = g / n
                if axis is None:
                    return g
                k = g.shape[axis] // n
                return lax.dynamic_slice_in_dim(g, i * k, k, axis=axis)

            blocks, state = adamw_step(blocks, jax.tree.map(block, grads, axes), state, lr, b1, b2, eps, wd, mask)
            new = jax.tree.map(lambda b, axis: b if axis is None else
                               lax.all_gather(b, "data", axis=axis, tiled=True, to="invarying"), blocks, axes)
            return new, state, lax.pmean(value, "data")

        blocks = jax.tree.map(jax.reshard, params, specs)
        return jax.shard_map(local, mesh=mesh, in_specs=(P(), specs, state_specs, P("data"), P("data")),
                             out_specs=(P(), state_specs, P()))(params, blocks, state, x, y)

    return step
