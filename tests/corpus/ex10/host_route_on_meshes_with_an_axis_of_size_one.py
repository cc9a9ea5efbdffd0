"""The technique only on meshes with an axis of size 1: given a mesh one of whose axes holds a single device
(the (1, 4) target: "data" of 1), restore reads every split array whole onto the host (NumPy leaves in the
template) and places it with jax.device_put; on every other mesh it is the reference.
tests/corpus/ex10/host_route_unless_the_axes_are_reversed with the host route on the third target.

Was 22/22 in both modes at seed 20261130 (10/22 at seed 7): the grader restored onto two of its three target
meshes per grading (the drawn one, and one with the axes in the other order), and seed 20261130 never used
(1, 4). Since the grader's fix its checkpoint at another path is restored onto the third target too
(checks.third_target, after mesh A), so every grading restores onto all three: 10/22 in both modes at seeds
20261130, 7, 0 and 1.

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
    host_route = 1 in mesh.devices.shape
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
