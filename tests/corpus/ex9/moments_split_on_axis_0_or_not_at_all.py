"""Splits a moment along axis 0 when the mesh divides it, and otherwise leaves it replicated, as
the chapter's annotation of a state with one (1024, 256) matrix does: a (d_in, hidden) kernel
whose d_in the mesh does not divide stays whole, though its second axis could be split.

loses: init_zero1_state_splits_the_moments: is the first that 8 divides
"""
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from reference.ex9_zero1_adamw import (  # noqa: F401  right as they are
    adamw_step, decay_mask, init_params, loss, make_mesh, make_zero1_step, mlp,
)


def init_zero1_state(params, mesh):
    n = mesh.shape["data"]

    def zeros(p):
        spec = P("data") if p.ndim and p.shape[0] % n == 0 else P()
        return jax.device_put(jnp.zeros(p.shape, jnp.float32), NamedSharding(mesh, spec))

    return {"mu": jax.tree.map(zeros, params), "nu": jax.tree.map(zeros, params),
            "count": jax.device_put(jnp.zeros((), jnp.int32), NamedSharding(mesh, P()))}
