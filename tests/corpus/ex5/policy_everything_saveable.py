"""nn.checkpoint(MLP, policy=everything_saveable): every intermediate is saved for the backward
pass, so nothing is recomputed; the checkpoint does no work.

loses: checkpoint_policy_saves_nothing: (everything_saveable) saves 2 value(s)
loses: nn_checkpoint_wraps_whole_mlp: saves as much for the backward pass as saving every intermediate value
technique: none (every number right, the technique not doing the work)
"""
import jax
import flax.linen as nn

from reference.ex5_linen_checkpoint import MLP  # right as they are


def nn_checkpoint_forward(seed, x, features):
    policy = jax.checkpoint_policies.everything_saveable
    model = nn.checkpoint(MLP, policy=policy)(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
