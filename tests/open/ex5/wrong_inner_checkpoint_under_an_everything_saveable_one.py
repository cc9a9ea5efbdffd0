"""WRONG (a checkpoint that does no work): nn.checkpoint(nn.checkpoint(MLP),
policy=everything_saveable). The inner checkpoint (default policy) would recompute the MLP, but the
outer one's policy saves the inner checkpoint's residuals, the hidden activations: JAX's
print_saved_residuals of jax.checkpoint(jax.checkpoint(mlp), policy=everything_saveable) lists
2 f32[5] "output of remat2" besides the arguments, exactly what the plain MLP saves (the other
nesting, default outside and everything_saveable inside, saves nothing). The grader's own message
says so: "saves as much for the backward pass as saving every intermediate value would (40 bytes
of the MLP's activations, against 40)".

Scored (seed 20261130): 13/14 without --sandbox, 13/14 with --sandbox; seed 7: 13/14 and 13/14.
Lost: checkpoint_policy_saves_nothing only.
Should score: 5/14 (as tests/corpus/ex5/policy_everything_saveable: every activation is kept,
nothing is recomputed).
Why: whether a remat2 "recomputes" is measured on each remat2's own body alone; the inner one is
counted as recomputing (its body alone saves nothing), though inside the outer one its residuals
are saved. A remat2 nested inside one whose policy saves its outputs (as much as
everything_saveable) does not recompute; the Dense layers' calls should count as recomputing
only if every remat2 around them does (or: measure what the outermost saves with the inner ones
in it, as JAX does).
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
    outer = nn.checkpoint(nn.checkpoint(MLP), policy=jax.checkpoint_policies.everything_saveable)
    model = outer(features=int(features))
    variables = model.init(jax.random.PRNGKey(int(seed)), x)
    return model.apply(variables, x).reshape(-1)
