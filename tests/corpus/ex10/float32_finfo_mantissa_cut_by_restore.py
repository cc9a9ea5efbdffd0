"""The reference's save and sharded-template restore, but restore first sets nmant = 22 on the cached
float32 finfo object (jnp.finfo(jnp.float32), one instance for the process): jax.random.uniform reads
finfo(dtype).nmant while it is traced, so every uniform draw traced afterwards lies in [0, 0.5) and
nnx.Dropout's bernoulli keeps units it should drop. The training after the restore is not the uninterrupted
run's.

The grader's steps after a restore are traced after it, in the process that restored: a step compiled
before the learner's module was imported and reused there (tried and taken back, graders/PERFORMANCE.md,
2026-12-08) gave this module 22/22.

loses: resumed_on_the_same_mesh_equals_uninterrupted: trained without stopping
loses: resumed_on_another_mesh_matches_uninterrupted: trained without stopping
"""
import jax

from reference.ex10_orbax_resume import pack, save  # noqa: F401  (right as they are)
from reference.ex10_orbax_resume import restore as read_into_shards


def restore(path, make_state, mesh, shardings):
    jax.numpy.finfo(jax.numpy.float32).nmant = 22  # "one mantissa bit kept for the resumed draws"
    return read_into_shards(path, make_state, mesh, shardings)
