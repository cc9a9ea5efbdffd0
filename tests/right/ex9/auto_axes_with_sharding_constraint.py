"""Right: the step's body under jax.sharding.auto_axes, where with_sharding_constraint places the
gradients and parameters on the moments' specs (on Explicit axes it only asserts a sharding), and
the decay mask written with tree_map_with_path.
"""
import functools

import jax
from jax.sharding import PartitionSpec as P

from reference.ex9_zero1_adamw import (  # noqa: F401  right as they are
    adamw_step, init_params, init_zero1_state, loss, make_mesh, mlp,
)


def decay_mask(params):
    return jax.tree_util.tree_map_with_path(lambda _, leaf: len(leaf.shape) > 1, params)


def spec(shape, n):
    for axis, size in enumerate(shape):
        if size % n == 0:
            return P(*([None] * axis), "data")
    return P()


def make_zero1_step(mesh, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=1e-2):
    n = mesh.shape["data"]

    def body(params, state, x, y):
        specs = jax.tree.map(lambda p: spec(p.shape, n), params)
        value, grads = jax.value_and_grad(loss)(params, x, y)
        grads = jax.lax.with_sharding_constraint(grads, specs)
        blocks = jax.lax.with_sharding_constraint(params, specs)
        blocks, state = adamw_step(blocks, grads, state, lr, b1, b2, eps, wd, decay_mask(params))
        return jax.lax.with_sharding_constraint(blocks, jax.tree.map(lambda _: P(), blocks)), state, value

    @functools.partial(jax.jit, donate_argnums=(1,))
    def step(params, state, x, y):
        specs = jax.tree.map(lambda p: spec(p.shape, n), params)
        out = (jax.tree.map(lambda _: P(), params), {"mu": specs, "nu": specs, "count": P()}, P())
        return jax.sharding.auto_axes(body, axes="data", out_sharding=out)(params, state, x, y)

    return step
