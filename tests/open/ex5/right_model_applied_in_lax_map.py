"""RIGHT (another loop primitive): the checkpointed model applied per example with jax.lax.map
(a scan) over a batch of one, x[None], and the output row taken back; the Dense layers and the
remat2 sit inside the scan's body. A fori_loop of one step around model.apply (a while loop)
scores the same 5/14 (tried, not kept as a file: same cause).

Scored (seed 20261130): 5/14 without --sandbox, 5/14 with --sandbox; seed 7: 5/14 and 5/14.
Lost: all four technique checks, "the technique checks run your program ... at inputs of their
own: what it returns there is not the output of its two Dense layers".
Should score: 14/14.
Why: the judge's evaluation of the rebuilt program (checks.at_points, _evaluated) descends only
into the taps' jits and remat2 equations; a scan or while equation is bound whole, so the taps
inside its body record nothing, `held` finds no first or second Dense layer, and the program is
declared not the exercise's MLP. (The reading of which taps run in which remat2, walk_nested,
does enter the body.)
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


def nn_checkpoint_forward(seed, x, features):
    model = nn.checkpoint(MLP)(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    rows = jax.lax.map(lambda row: model.apply(variables, row), x[None])
    return rows[0]
