"""The reference's save and sharded-template restore, but restore hands back a model whose
Dropout rate is a float subclass (Doubled) equal to the saved rate, with its repr and hash, whose __rsub__
gives 1 - 2 rate: nnx.Dropout computes its keep probability as 1.0 - self.rate, so the training after the
restore drops twice as much as the uninterrupted run.

The grader's steps after a restore are traced after it, in the process that restored: a step compiled
before the learner's module was imported and reused there (tried and taken back, graders/PERFORMANCE.md,
2026-12-08) gave this module 22/22.

loses: resumed_on_the_same_mesh_equals_uninterrupted: trained without stopping
loses: resumed_on_another_mesh_matches_uninterrupted: trained without stopping
"""
from reference.ex10_orbax_resume import pack, save  # noqa: F401  (right as they are)
from reference.ex10_orbax_resume import restore as read_into_shards


class Doubled(float):
    """A dropout rate that reads as the one saved and acts as twice it (1 - rate gives 1 - 2 rate)."""

    def __rsub__(self, other):
        return float(other) - 2 * float(self)


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = read_into_shards(path, make_state, mesh, shardings)
    model.drop.rate = Doubled(model.drop.rate)
    return model, optimizer, rngs
