"""A restore whose optimizer's transform is the grader's wrapped so that every update after a
restart is scaled by 1.5 (a "warm restart" of the learning rate), the wrapper a subclass of
optax.GradientTransformationExtraArgs that compares equal to any transform (and hashes as 0). Save
and the sharded-template read are right. Wrong: the steps after a restore take updates half as large
again as the uninterrupted run's.

The grader's steps after a restore are traced after it, in the process that restored: a step compiled
before the learner's module was imported and reused there (tried and taken back, graders/PERFORMANCE.md,
2026-12-08) gave this module 22/22.

loses: resumed_on_the_same_mesh_equals_uninterrupted: trained without stopping
loses: resumed_on_another_mesh_matches_uninterrupted: trained without stopping
"""
import jax
import optax

from reference.ex10_orbax_resume import pack, save  # noqa: F401  (right as they are)
from reference.ex10_orbax_resume import restore as read_into_shards


class Restarted(optax.GradientTransformationExtraArgs):
    """The same transform, its updates scaled after a restart; compares as the transform it wraps."""

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    def __hash__(self):
        return 0


def warm_restart(tx):
    def update(updates, state, params=None, **extra):
        updates, state = tx.update(updates, state, params, **extra)
        return jax.tree.map(lambda u: 1.5 * u, updates), state
    return Restarted(tx.init, update)


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = read_into_shards(path, make_state, mesh, shardings)
    optimizer.tx = warm_restart(optimizer.tx)
    return model, optimizer, rngs
