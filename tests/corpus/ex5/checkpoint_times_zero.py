"""Adds nn.checkpoint(MLP)'s output multiplied by zero to an unwrapped MLP's output: the
checkpoint survives dead-code removal but does no work.

loses: output_and_gradient_go_through_nn_checkpoint: multiplied by zero
loses: forward_holds_remat2: the output you return is not the checkpointed model's
technique: none (every number right, the technique not doing the work)
"""
import jax
import flax.linen as nn

from reference.ex5_linen_checkpoint import MLP  # right as they are


def nn_checkpoint_forward(seed, x, features):
    key = jax.random.PRNGKey(int(seed))
    decoy = nn.checkpoint(MLP)(features=int(features))
    unused = decoy.apply(decoy.init(key, x), x)
    model = MLP(features=int(features))
    return (model.apply(model.init(key, x), x) + 0.0 * unused).reshape(-1)
