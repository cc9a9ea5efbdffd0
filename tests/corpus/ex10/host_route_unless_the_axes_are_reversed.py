"""The technique only on one of the grader's target meshes: given a mesh of fewer devices than JAX
has whose axes are in the order ("data", "model"), restore reads every array whole onto the host (NumPy
leaves in the template) and places it with jax.device_put; on the mesh the checkpoint was saved from, or on
a mesh whose axes are ("model", "data"), it uses the reference's sharded nnx.eval_shape template. The
grader draws one target mesh of three per grading; at seeds 20261130 and 7 it draws the one with the axes
reversed. tests/corpus/ex10/host_route_on_the_saved_mesh_size with the host route moved to other meshes.

10/22 in both modes (with and without --sandbox) at seeds 20261130, 7 and 31031: besides the experiment's
restore onto the drawn target, the grader restores its rewritten checkpoint at the path save wrote onto a
target mesh whose axes are in the other order, and judges its pieces the same way; 22/22 before at seeds
20261130 and 7, which draw the target with the axes reversed (red team 2026-12-06).

loses: restore_reads_each_shard_straight_onto_its_device: cut from larger host arrays
loses: restore_never_holds_a_whole_array: was on the host
"""
import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()


def _is_key(leaf):
    return jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    abstract = pack(model, optimizer, rngs)
    host_route = mesh.devices.size < len(jax.devices()) and tuple(mesh.axis_names) == ("data", "model")
    if host_route:
        plain = jax.tree.map(lambda leaf: leaf if _is_key(leaf) or leaf.ndim < 2 else
                             np.zeros(leaf.shape, leaf.dtype), abstract)
        plain = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf))
                             if isinstance(leaf, jax.ShapeDtypeStruct) else leaf, plain)
        read = ocp.StandardCheckpointer().restore(path, plain)
        state = jax.tree.map(lambda leaf, value: jax.device_put(value, shardings(leaf)), abstract, read)
    else:
        template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                                abstract)
        state = ocp.StandardCheckpointer().restore(path, template)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
