"""nn.checkpoint(MLP, policy=dots_saveable): the matrix products are saved, only the rest is
recomputed; the exercise asks for the default policy, which saves nothing.

loses: checkpoint_policy_saves_nothing: (dots_saveable) saves 1 value(s) for the backward pass (float32[6] output of a matrix product (@, jnp.dot, jnp.einsum))
"""
import jax
import flax.linen as nn

from reference.ex5_linen_checkpoint import MLP  # right as they are


def nn_checkpoint_forward(seed, x, features):
    policy = jax.checkpoint_policies.dots_saveable
    model = nn.checkpoint(MLP, policy=policy)(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
