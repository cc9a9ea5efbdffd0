"""nn.checkpoint(MLP) with a policy that saves every value but those of broadcast_in_dim: the
only one in the MLP's backward pass is the zeros ReLU's derivative selects from, a constant that
depends on no input. Every activation is still saved, so nothing of the MLP is recomputed: the
checkpoint does no work, though its policy does leave something out.

loses: forward_holds_remat2: saves as much
loses: checkpoint_policy_saves_nothing: saves 2 value(s)
loses: output_and_gradient_go_through_nn_checkpoint: saves as much
loses: nn_checkpoint_wraps_whole_mlp: saves as much
technique: none (every number right, the technique not doing the work)
"""
import jax
import flax.linen as nn

from reference.ex5_linen_checkpoint import MLP  # right as they are


def everything_but_constants(prim, *_, **__):
    return prim.name != "broadcast_in_dim"


def nn_checkpoint_forward(seed, x, features):
    model = nn.checkpoint(MLP, policy=everything_but_constants)(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
