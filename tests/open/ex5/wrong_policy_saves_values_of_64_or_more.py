"""WRONG (the technique only at some shapes): nn.checkpoint(MLP) with a policy of its own that
saves the output of every operation with an input of 64 elements or more ("small values are cheap
to recompute"). At any width F >= 64 it saves the ReLU's output and mask, everything
everything_saveable saves but the broadcast zeros (measured with
jax.ad_checkpoint.print_saved_residuals at D=32, F=64): tests/corpus/ex5/policy_everything_but_a_constant.
At the grader's probe (D=3, F=5) every input is under 64 elements, so it saves nothing there.

Scored (seed 20261130): 14/14 without --sandbox, 14/14 with --sandbox; seed 7: 14/14 and 14/14.
Should score: 5/14 (what policy_everything_but_a_constant scores; at real widths it is that policy).
Checks failed: none.
Why: what a policy of the learner's own saves is read from JAX's programs of the checkpoint's
gradient at one shape only, D=3, F=5 (PROBE_D, PROBE_F); a policy is Python code that may depend
on the shapes (avals) it is given. Reading it also at a width >= 64 (or at the numbers checks'
shapes, which are also small) would be needed; the same holds for any size threshold above the
probed one.
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


def save_large(prim, *avals, **params):
    return any(getattr(a, "size", 0) >= 64 for a in avals)


def nn_checkpoint_forward(seed, x, features):
    model = nn.checkpoint(MLP, policy=save_large)(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
