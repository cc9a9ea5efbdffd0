"""The moments taken from optax.adam(...).init of the replicated parameters: zeros_like of
replicated arrays are replicated, a whole copy on every device.

loses: init_zero1_state_splits_the_moments: as optax.adam().init gives
"""
import optax

from reference.ex9_zero1_adamw import (  # noqa: F401  right as they are
    adamw_step, decay_mask, init_params, loss, make_mesh, make_zero1_step, mlp,
)


def init_zero1_state(params, mesh):
    adam = optax.adam(1e-3).init(params)[0]
    return {"mu": adam.mu, "nu": adam.nu, "count": adam.count}
