"""nn.checkpoint(nn.checkpoint(MLP), policy=everything_saveable): the inner checkpoint (default
policy) would recompute the MLP, but the outer one's policy saves the inner one's residuals, the
hidden activations (JAX's print_saved_residuals lists 2 f32[5] "output of remat2", what the plain
MLP saves), so nothing is recomputed: a remat2 recomputes only if every remat2 around it does.
(Red team; was graded 13/14.)

loses: forward_holds_remat2: (everything_saveable) saves as much for the backward pass as saving every intermediate value
loses: checkpoint_policy_saves_nothing: (everything_saveable) saves 2 value(s)
loses: output_and_gradient_go_through_nn_checkpoint: saves as much for the backward pass as saving every intermediate value
loses: nn_checkpoint_wraps_whole_mlp: saves as much for the backward pass as saving every intermediate value
technique: none (every number right, the technique not doing the work)
"""
import jax
import flax.linen as nn


class MLP(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(self.features)(x)
        x = nn.relu(x)
        return nn.Dense(self.features)(x)


def nn_checkpoint_forward(seed, x, features):
    outer = nn.checkpoint(nn.checkpoint(MLP), policy=jax.checkpoint_policies.everything_saveable)
    model = outer(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
