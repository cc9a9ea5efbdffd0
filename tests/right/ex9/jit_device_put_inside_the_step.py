"""Right: shardings under jax.jit written with jax.device_put(x, NamedSharding(mesh, spec)) inside
the step, for the gradients and parameters going to the moments' placement and the new
parameters coming back replicated.
"""
import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from reference.ex9_zero1_adamw import (  # noqa: F401  right as they are
    adamw_step, decay_mask, init_params, init_zero1_state, loss, make_mesh, mlp, zero1_spec,
)


def make_zero1_step(mesh, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=1e-2):
    n = mesh.shape["data"]
    put = lambda a, spec: jax.device_put(a, NamedSharding(mesh, spec))  # noqa: E731

    @jax.jit
    def step(params, state, x, y):
        specs = jax.tree.map(lambda p: zero1_spec(p.shape, n), params)
        value, grads = jax.value_and_grad(loss)(params, x, y)
        blocks, state = adamw_step(jax.tree.map(put, params, specs), jax.tree.map(put, grads, specs), state,
                                   lr, b1, b2, eps, wd, decay_mask(params))
        return jax.tree.map(lambda b: put(b, P()), blocks), state, value

    return step
