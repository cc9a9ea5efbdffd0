"""Initialises and applies nn.checkpoint(MLP), throws the result away, and returns an unwrapped
MLP's output instead.

loses: forward_holds_remat2: the checkpointed model's output is thrown away
technique: none (every number right, the technique not doing the work)
"""
import jax
import flax.linen as nn

from reference.ex5_linen_checkpoint import MLP  # right as they are


def nn_checkpoint_forward(seed, x, features):
    key = jax.random.PRNGKey(int(seed))
    decoy = nn.checkpoint(MLP)(features=int(features))
    decoy.apply(decoy.init(key, x), x)
    model = MLP(features=int(features))
    return model.apply(model.init(key, x), x).reshape(-1)
