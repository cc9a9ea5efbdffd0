"""The moments made with jnp.zeros(..., device=NamedSharding(mesh, spec)), the rule's spec, but
inside a jax.jit of init_zero1_state's own: there JAX drops that sharding (lax.full: "sharding will
currently be ignored in jitted mode"), so the call returns replicated zeros. The grader keeps the
placement of device= only where the call itself keeps it (at init_zero1_state's top level), so
this is read as the call runs: replicated.

loses: init_zero1_state_splits_the_moments: is replicated: every device holds all
"""
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from reference.ex9_zero1_adamw import (  # noqa: F401  right as they are
    adamw_step, decay_mask, init_params, loss, make_mesh, make_zero1_step, mlp,
)


def zero1_spec(shape, n):
    axis = next((i for i, d in enumerate(shape) if d % n == 0), None)
    return P() if axis is None else P(*([None] * axis), "data")


def init_zero1_state(params, mesh):
    n = mesh.shape["data"]

    @jax.jit
    def made():
        def zeros(p):
            return jnp.zeros(p.shape, jnp.float32, device=NamedSharding(mesh, zero1_spec(p.shape, n)))

        return {"mu": jax.tree.map(zeros, params), "nu": jax.tree.map(zeros, params),
                "count": jnp.zeros((), jnp.int32)}

    return made()
