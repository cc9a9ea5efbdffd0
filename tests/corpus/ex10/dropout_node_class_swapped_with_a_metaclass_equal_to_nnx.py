"""A
right CheckpointManager save and sharded-template restore, but restore then sets model.drop.__class__ to a
subclass named Dropout whose __call__ multiplies nnx.Dropout's output by the keep rate ("the
original paper's scaling", on top of the inverted scaling nnx.Dropout already does), and
gives that class a metaclass whose __eq__ and __hash__ equal nnx.Dropout's. Every step traced on these
objects calls the learner's __call__; the training after the restore is not the uninterrupted run's.

The grader's steps after a restore are traced after it, in the process that restored: a step compiled
before the learner's module was imported and reused there (tried and taken back, graders/PERFORMANCE.md,
2026-12-08) gave this module 22/22.

loses: resumed_on_the_same_mesh_equals_uninterrupted: trained without stopping
loses: resumed_on_another_mesh_matches_uninterrupted: trained without stopping
"""
from flax import nnx

from reference.ex10_orbax_resume import pack, save  # noqa: F401  (right as they are)
from reference.ex10_orbax_resume import restore as read_into_shards


class _Meta(type(nnx.Dropout)):
    def __eq__(cls, other):
        return other is nnx.Dropout or type.__eq__(cls, other) is True

    def __hash__(cls):
        return hash(nnx.Dropout)


class Dropout(nnx.Dropout):
    """Dropout whose kept units are scaled back by the keep rate (the original paper's convention)."""

    def __call__(self, inputs, *args, **kwargs):
        return super().__call__(inputs, *args, **kwargs) * (1 - self.rate)


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = read_into_shards(path, make_state, mesh, shardings)
    Dropout.__class__ = _Meta
    model.drop.__class__ = Dropout
    return model, optimizer, rngs
