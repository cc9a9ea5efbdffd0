"""shard_map: each weight matrix's gradient with its split axis moved to the front (jnp.moveaxis),
summed whole with lax.psum, and each device takes its rows: every device receives the whole sum,
though the summed array's shape is not the parameter's. The vectors are reduce-scattered. Every
number is right.

loses: gradients_are_not_summed_whole: whole, in another shape
"""
import jax
import jax.numpy as jnp
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

            def mine(a, axis, summed):
                if axis is None:
                    return lax.psum(a, "data") / n if summed else a
                if summed and a.ndim == 1:
                    return lax.psum_scatter(a, "data", scatter_dimension=0, tiled=True) / n
                front = jnp.moveaxis(a, axis, 0)
                if summed:
                    front = lax.psum(front, "data") / n
                k = front.shape[0] // n
                return jnp.moveaxis(lax.dynamic_slice_in_dim(front, i * k, k, axis=0), 0, axis)

            grads = jax.tree.map(lambda g, a: mine(g, a, True), grads, axes)
            blocks = jax.tree.map(lambda p, a: mine(p, a, False), params, axes)
            blocks, state = adamw_step(blocks, grads, state, lr, b1, b2, eps, wd, mask)
            new = jax.tree.map(lambda b, axis: b if axis is None else
                               lax.all_gather(b, "data", axis=axis, tiled=True, to="invarying"), blocks, axes)
            return new, state, lax.pmean(value, "data")

        return jax.shard_map(local, mesh=mesh, in_specs=(P(), state_specs, P("data"), P("data")),
                             out_specs=(P(), state_specs, P()))(params, state, x, y)

    return step
