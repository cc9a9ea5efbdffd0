"""The reference's save and sharded-template restore, but restore then sets model.drop.__class__ to a
subclass named Dropout whose __call__ multiplies nnx.Dropout's output by the keep rate ("the original paper's
scaling", on top of the inverted scaling nnx.Dropout already does): every step traced on the restored objects
calls it, and the training after the restore is not the uninterrupted run's (losses of steps 3..5 [2.589,
2.093, 1.642] against [6.25, 6.584, 4.914] at seed 20261130).

The grader's steps after a restore are traced after it, on what restore returned.

loses: resumed_on_the_same_mesh_equals_uninterrupted: trained without stopping
loses: resumed_on_another_mesh_matches_uninterrupted: trained without stopping
"""
from flax import nnx

from reference.ex10_orbax_resume import pack, save  # noqa: F401  (right as they are)
from reference.ex10_orbax_resume import restore as read_into_shards


class Dropout(nnx.Dropout):
    """Dropout whose kept units are scaled back by the keep rate (the original paper's convention)."""

    def __call__(self, inputs, *args, **kwargs):
        return super().__call__(inputs, *args, **kwargs) * (1 - self.rate)


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = read_into_shards(path, make_state, mesh, shardings)
    model.drop.__class__ = Dropout
    return model, optimizer, rngs
