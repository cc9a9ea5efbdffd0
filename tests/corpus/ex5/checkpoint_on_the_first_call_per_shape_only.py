"""nn.checkpoint(MLP) on the first call at each (D, F) only; from the second call at a shape on,
the plain (unwrapped) MLP: in a training loop only the first step would be checkpointed. The
technique checks trace the very call the first numbers check made (checks.PROBE_*), so they see
the plain MLP. (Red team; was graded 14/14 when the program was traced at a shape of its own.)

loses: forward_holds_remat2: your model is not checkpointed
loses: output_and_gradient_go_through_nn_checkpoint: your model is not checkpointed
technique: none (every number right, the technique not doing the work)
graded whole: the technique checks read a call the numbers checks before them made; graded alone, theirs is the first
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


_seen = set()


def nn_checkpoint_forward(seed, x, features):
    shape = (x.shape[-1], int(features))
    cls = MLP if shape in _seen else nn.checkpoint(MLP)
    _seen.add(shape)
    model = cls(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
