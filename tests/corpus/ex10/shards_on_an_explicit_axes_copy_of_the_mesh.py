"""A restore that reads each shard straight onto its device, but onto a mesh of its own: the given
mesh's devices and axis names with AxisType.Explicit, each leaf's sharding the given spec on that
mesh (placements equivalent to the requested ones, so restored_leaves_have_the_requested_shardings
passes). Save is the reference's. Wrong: the arrays come back typed for an Explicit mesh,
which a step jitted under the given (Auto) mesh refuses ("context mesh ... should match the aval mesh
..."): the grader's nnx.jit step cannot train on them, nor can a learner's step under
jax.set_mesh(mesh).

The grader's steps after a restore are traced after it, in the process that restored: a step compiled
before the learner's module was imported and reused there (tried and taken back, graders/PERFORMANCE.md,
2026-12-08) gave this module 22/22.

loses: resumed_on_the_same_mesh_equals_uninterrupted: could not run on what restore returned
loses: resumed_on_another_mesh_matches_uninterrupted: could not run on what restore returned
"""
import jax
import orbax.checkpoint as ocp
from flax import nnx
from jax.sharding import AxisType, NamedSharding

from reference.ex10_orbax_resume import pack, save  # noqa: F401  (right as they are)


def restore(path, make_state, mesh, shardings):
    own = jax.sharding.Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Explicit,) * len(mesh.axis_names))
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(
        leaf.shape, leaf.dtype, sharding=NamedSharding(own, shardings(leaf).spec)), pack(model, optimizer, rngs))
    state = ocp.StandardCheckpointer().restore(path, template)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
