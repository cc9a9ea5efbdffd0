"""Checkpoints model.init only; the model that is applied (and differentiated) is not.

loses: forward_holds_remat2: only model.init (or something else) is checkpointed
technique: none (every number right, the technique not doing the work)
"""
import jax

from reference.ex5_linen_checkpoint import MLP  # right as they are


def nn_checkpoint_forward(seed, x, features):
    model = MLP(features=int(features))
    variables = jax.checkpoint(model.init)(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
