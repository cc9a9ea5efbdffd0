"""nn.checkpoint(MLP) with a policy that saves every value but those of `gt` (the mask of where
the ReLU's input is positive). The backward pass then keeps the ReLU's input instead, to make the
mask again from it: something is recomputed, but more bytes of the MLP's activations are kept than
saving everything would keep, so the checkpoint saves no memory.

loses: forward_holds_remat2: saves as much
loses: checkpoint_policy_saves_nothing: output of an addition (+)
loses: output_and_gradient_go_through_nn_checkpoint: saves as much
loses: nn_checkpoint_wraps_whole_mlp: saves as much
technique: none (every number right, the technique not doing the work)
"""
import jax
import flax.linen as nn

from reference.ex5_linen_checkpoint import MLP  # right as they are


def nn_checkpoint_forward(seed, x, features):
    model = nn.checkpoint(MLP, policy=lambda prim, *_, **__: prim.name != "gt")(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
