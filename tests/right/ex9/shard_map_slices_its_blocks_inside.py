"""Right: shard_map whose blocks of the parameters are cut inside it (lax.axis_index and
lax.dynamic_slice_in_dim) from the replicated parameters, instead of being passed in split; the
gradients reduce-scattered with psum_scatter, the new blocks all-gathered.
"""
import jax
from jax import lax
from jax.sharding import PartitionSpec as P

from reference.ex9_zero1_adamw import (  # noqa: F401  right as they are
    adamw_step, decay_mask, init_params, init_zero1_state, loss, make_mesh, mlp, split_axis, zero1_spec,
)


def make_zero1_step(mesh, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=1e-2):
    n = mesh.shape["data"]

    def local(params, state, x, y):
        axes = jax.tree.map(lambda p: split_axis(p.shape, n), params)
        value, grads = jax.value_and_grad(loss)(lax.pcast(params, "data", to="varying"), x, y)
        grads = jax.tree.map(lambda g, a: lax.pmean(g, "data") if a is None else
                             lax.psum_scatter(g, "data", scatter_dimension=a, tiled=True) / n, grads, axes)
        i = lax.axis_index("data")
        blocks = jax.tree.map(lambda p, a: p if a is None else
                              lax.dynamic_slice_in_dim(p, i * (p.shape[a] // n), p.shape[a] // n, axis=a),
                              params, axes)
        blocks, state = adamw_step(blocks, grads, state, lr, b1, b2, eps, wd, decay_mask(params))
        new = jax.tree.map(lambda b, a: b if a is None else
                           lax.all_gather(b, "data", axis=a, tiled=True, to="invarying"), blocks, axes)
        return new, state, lax.pmean(value, "data")

    @jax.jit
    def step(params, state, x, y):
        specs = jax.tree.map(lambda p: zero1_spec(p.shape, n), params)
        state_specs = {"mu": specs, "nu": specs, "count": P()}
        return jax.shard_map(local, mesh=mesh, in_specs=(P(), state_specs, P("data"), P("data")),
                             out_specs=(P(), state_specs, P()))(params, state, x, y)

    return step
