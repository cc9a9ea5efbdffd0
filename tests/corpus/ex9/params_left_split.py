"""Returns the updated parameter blocks as they are: the parameters leave the step split over
"data", never all-gathered (the next step's forward pass gathers them instead).

loses: step_keeps_params_replicated_and_moments_split: is left split
loses: only_the_updated_parameters_are_all_gathered: left split after the step
"""
import jax

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
                                   state, lr, b1, b2, eps, wd, decay_mask(params))
        return blocks, state, value

    return step
