"""WRONG (state that changes between calls): nn.checkpoint(MLP) on the first call at each (D, F)
only; from the second call at a shape on, the plain (unwrapped) MLP. In a training loop
(jax.grad of the forward each step) only the first step is checkpointed.

Scored (seed 20261130): 14/14 without --sandbox, 14/14 with --sandbox; seed 7: 14/14 and 14/14.
Should score: 5/14 (what the plain MLP it runs from the second call on scores:
tests/corpus/ex5/no_checkpoint).
Checks failed: none.
Why: the program is traced once, at (D, F) = (3, 5), which no numbers check uses, so the traced
call is the first at its shape; nothing traces it a second time (or at a shape already called) to
see that the program is the same. (ex9/wrong_step_changes_after_the_third_made is the same kind
of finding.)
Grade: put this file as ex5_linen_checkpoint.py in a folder D; .venv/bin/python -m graders ex5 --solutions D -v --seed 20261130 [--sandbox]
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
