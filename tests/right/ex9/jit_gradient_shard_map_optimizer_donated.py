"""Right: the gradient taken under jax.jit on the global arrays (the compiler reduces it), and
only the optimizer in a shard_map: each device updates its blocks, given the gradients placed as
the moments, and all-gathers the new blocks. The step donates the state it replaces
(donate_argnums), as a memory-minded training loop does.
"""
import functools

import jax
from jax import lax
from jax.sharding import PartitionSpec as P

from reference.ex9_zero1_adamw import (  # noqa: F401  right as they are
    adamw_step, decay_mask, init_params, init_zero1_state, loss, make_mesh, mlp, split_axis, zero1_spec,
)


def make_zero1_step(mesh, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=1e-2):
    n = mesh.shape["data"]

    @functools.partial(jax.jit, donate_argnums=(1,))
    def step(params, state, x, y):
        axes = jax.tree.map(lambda p: split_axis(p.shape, n), params)
        specs = jax.tree.map(lambda p: zero1_spec(p.shape, n), params)
        state_specs = {"mu": specs, "nu": specs, "count": P()}
        mask = decay_mask(params)
        value, grads = jax.value_and_grad(loss)(params, x, y)

        def update(blocks, grads, state):
            blocks, state = adamw_step(blocks, grads, state, lr, b1, b2, eps, wd, mask)
            return jax.tree.map(lambda b, a: b if a is None else
                                lax.all_gather(b, "data", axis=a, tiled=True, to="invarying"), blocks, axes), state

        blocks = jax.tree.map(jax.reshard, params, specs)
        grads = jax.tree.map(jax.reshard, grads, specs)
        new, state = jax.shard_map(update, mesh=mesh, in_specs=(specs, specs, state_specs),
                                   out_specs=(P(), state_specs))(blocks, grads, state)
        return new, state, value

    return step
