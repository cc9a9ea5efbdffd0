"""A mask that decays every leaf: biases and norm scales are decayed too.

loses: decay_mask_marks_weight_matrices: marks every leaf True
loses: zero1_training_matches_single_device: expected
"""
import jax
from jax.sharding import PartitionSpec as P

from reference.ex9_zero1_adamw import (  # noqa: F401  right as they are
    adamw_step, init_params, init_zero1_state, loss, make_mesh, mlp, zero1_spec,
)


def decay_mask(params):
    return jax.tree.map(lambda p: True, params)


def make_zero1_step(mesh, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=1e-2):
    n = mesh.shape["data"]

    @jax.jit
    def step(params, state, x, y):
        specs = jax.tree.map(lambda p: zero1_spec(p.shape, n), params)
        value, grads = jax.value_and_grad(loss)(params, x, y)
        blocks, state = adamw_step(jax.tree.map(jax.reshard, params, specs), jax.tree.map(jax.reshard, grads, specs),
                                   state, lr, b1, b2, eps, wd, decay_mask(params))
        return jax.tree.map(lambda b: jax.reshard(b, P()), blocks), state, value

    return step
