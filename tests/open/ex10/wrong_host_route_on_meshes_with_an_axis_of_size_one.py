"""The technique only on meshes with an axis of size 1: given a mesh one of whose axes holds a single device
(the (1, 4) target: "data" of 1), restore reads every split array whole onto the host (NumPy leaves in the
template) and places it with jax.device_put; on every other mesh it is the reference. The grader draws one
target mesh of three per grading and restores its rewritten checkpoint onto one more, with the axes in the
other order: at seed 20261130 those are the (2, 2) meshes, never the (1, 4) one.
tests/corpus/ex10/host_route_unless_the_axes_are_reversed with the host route on the third target.

Scored 22/22 in both modes (with and without --sandbox) at seed 20261130, whose drawn target and saved-path
target are the two (2, 2) meshes; 10/22 at seed 7 (both modes), whose saved-path target is the (1, 4) mesh.
Should score: 10/22 (loses restore_reads_each_shard_straight_onto_its_device: cut from larger host arrays, and
restore_never_holds_a_whole_array: was on the host) at every seed. The grader restores onto two of its three
target meshes per grading (the drawn one and one with the axes in the other order), so a host route on any
one target escapes the seeds that draw the other two: finite draws, like wrong_host_route_for_leaves_over_4096.
Grade: put this file as ex10_orbax_resume.py in a folder D;
.venv/bin/python -m graders ex10 --solutions D -v --seed 20261130 [--sandbox]
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
