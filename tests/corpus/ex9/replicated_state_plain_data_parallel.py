"""Plain data parallelism: the moments made replicated, as optax.adam().init makes them for
replicated parameters, and gathered whole in the step; every device updates every leaf whole.
Every number is right.

loses: init_zero1_state_splits_the_moments: as optax.adam().init gives
loses: step_keeps_params_replicated_and_moments_split: comes back replicated
loses: only_the_updated_parameters_are_all_gathered: Moments sharded but gathered inside the step
loses: each_device_updates_only_its_blocks: Each device updates whole leaves
technique: none (every number right, the optimizer state never split)
"""
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from reference.ex9_zero1_adamw import (  # noqa: F401  right as they are
    adamw_step, decay_mask, init_params, loss, make_mesh, mlp,
)


def init_zero1_state(params, mesh):
    zeros = jax.tree.map(lambda p: jax.device_put(jnp.zeros(p.shape, jnp.float32), NamedSharding(mesh, P())), params)
    return {"mu": zeros, "nu": jax.tree.map(jnp.copy, zeros),
            "count": jax.device_put(jnp.zeros((), jnp.int32), NamedSharding(mesh, P()))}


def make_zero1_step(mesh, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=1e-2):
    @jax.jit
    def step(params, state, x, y):
        state = jax.tree.map(lambda a: jax.reshard(a, P()), state)
        value, grads = jax.value_and_grad(loss)(params, x, y)
        params, state = adamw_step(params, grads, state, lr, b1, b2, eps, wd, decay_mask(params))
        return params, state, value

    return step
