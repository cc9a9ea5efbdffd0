"""nn.checkpoint(MLP, prevent_cse=False): the jaxpr recomputes the MLP, but once compiled XLA
merges the recomputation with the forward pass (common-subexpression elimination), so the
activations are kept and no memory is saved. prevent_cse=False is meant for checkpoints inside a
scan.

loses: forward_holds_remat2: prevent_cse=False
loses: output_and_gradient_go_through_nn_checkpoint: prevent_cse=False
loses: nn_checkpoint_wraps_whole_mlp: prevent_cse=False
technique: none (every number right, the technique not doing the work)
"""
import jax
import flax.linen as nn

from reference.ex5_linen_checkpoint import MLP  # right as they are


def nn_checkpoint_forward(seed, x, features):
    model = nn.checkpoint(MLP, prevent_cse=False)(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
