"""RIGHT (?): model.init_with_output(key, x) on nn.checkpoint(MLP)(features): Flax's one call that
initialises the checkpointed model and applies it, returning (output, variables); the output is
returned. The numbers are right and the output is the checkpointed model's.

Scored (seed 20261130): 4/14 without --sandbox, 4/14 with --sandbox; seed 7: 4/14 and 4/14.
Lost: parameter_tree_is_dense_0_dense_1 ("no Flax Linen module was applied to parameters") and
all four technique checks ("your program could not be read: your program holds the primitive
'random_wrap', which no exercise's program needs").
Should score: 14/14 if init_with_output counts as initialising and applying the model (the
exercise's steps 3 and 4 say model.init, then apply; this is the policy question). If it does not,
a message that says so rather than an unreadable program.
Why: the probes intercept only calls made while not initialising, and the traced program's
random draws sit inside the lifted remat2 together with x's path, so JAX's partial evaluation
(probes.sendable) cannot move them into the constants.
Decided: not a right solution. The exercise's steps 3 and 4 are model.init, then
apply the model to x; what it checkpoints is the model applied to given parameters, the step a
training loop repeats. init_with_output never applies the model to parameters, and its remat2
holds the random initialisation too (recomputed in the backward pass). It keeps 4/14, now with
the message "no nn.Dense layer was applied while your function ran: model.init (or
init_with_output) initialises a model, it does not apply it" instead of an unreadable program.
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
    out, _ = model.init_with_output(jax.random.PRNGKey(int(seed)), x)
    return out.reshape(-1)
