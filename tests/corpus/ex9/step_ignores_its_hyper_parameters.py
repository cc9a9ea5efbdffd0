"""The step runs AdamW with the usual defaults (b1 0.9, b2 0.999, eps 1e-8) instead of the values
make_zero1_step was given; only the learning rate and the decay are passed on.

loses: zero1_training_matches_single_device: expected
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
        blocks, state = adamw_step(jax.tree.map(jax.reshard, params, specs), jax.tree.map(jax.reshard, grads, specs),
                                   state, lr, 0.9, 0.999, 1e-8, wd, decay_mask(params))
        return jax.tree.map(lambda b: jax.reshard(b, P()), blocks), state, value

    return step
