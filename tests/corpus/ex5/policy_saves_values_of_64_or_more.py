"""nn.checkpoint(MLP) with a policy of its own that saves the output of every operation with an
input of 64 elements or more ("small values are cheap to recompute"): at any real width it saves
the ReLU's output and mask, as tests/corpus/ex5/policy_everything_but_a_constant. The program is
read at F = 64 (checks.INT_CASES[0]). (Red team rt-ex5; was graded 14/14 when read at F = 5. A
threshold above 64 elements would still pass: what a policy of one's own decides by size is read
at one size.)

loses: forward_holds_remat2: saves as much
loses: checkpoint_policy_saves_nothing: saves 2 value(s)
loses: output_and_gradient_go_through_nn_checkpoint: saves as much
loses: nn_checkpoint_wraps_whole_mlp: saves as much
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


def save_large(prim, *avals, **params):
    return any(getattr(a, "size", 0) >= 64 for a in avals)


def nn_checkpoint_forward(seed, x, features):
    model = nn.checkpoint(MLP, policy=save_large)(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
