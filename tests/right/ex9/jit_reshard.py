"""Right: ZeRO-1 written with shardings under jax.jit: jax.reshard of the gradients and the
parameters to the moments' specs, and back to P() after the update. The compiler chooses the
collectives (on CPU an all-reduce and each device's slice; GPU and TPU make a reduce-scatter).
"""
import jax
from jax.sharding import PartitionSpec as P

from reference.ex9_zero1_adamw import (  # noqa: F401  right as they are
    adamw_step, decay_mask, init_params, init_zero1_state, loss, make_mesh, mlp, zero1_spec,
)


def make_zero1_step(mesh, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=1e-2):
    n = mesh.shape["data"]

    @jax.jit
    def step(params, state, x, y):
        specs = jax.tree.map(lambda p: zero1_spec(p.shape, n), params)
        value, grads = jax.value_and_grad(loss)(params, x, y)
        grads = jax.tree.map(jax.reshard, grads, specs)
        blocks = jax.tree.map(jax.reshard, params, specs)
        blocks, state = adamw_step(blocks, grads, state, lr, b1, b2, eps, wd, decay_mask(params))
        return jax.tree.map(lambda b: jax.reshard(b, P()), blocks), state, value

    return step
