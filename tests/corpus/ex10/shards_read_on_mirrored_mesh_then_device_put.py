"""Each shard read onto the wrong device, then moved by jax.device_put afterwards: the template gives each
split leaf the spec shardings(leaf) asks for, but on a mesh of the same devices in reverse order
(jax.sharding.Mesh(mesh.devices[::-1, ::-1], ...)), so Orbax reads every shard onto the device that holds
the mirrored block; jax.device_put(value, shardings(leaf)) then moves every block to its device. The
stub forbids exactly this ("Do not jax.device_put afterwards"; "nothing is moved afterwards"). A
device_put between shardings of the same devices in another order is done by JAX's own reshard (a jitted
collective), not through pxla.batched_device_put; the grader's fix records it too.
11/22 in both modes (seeds 20261130, 7); 22/22 before (red team 2026-12-06).

loses: restore_reads_each_shard_straight_onto_its_device: copied from one device to another
"""
import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx
from jax.sharding import Mesh, NamedSharding


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    mirrored = Mesh(np.asarray(mesh.devices)[::-1, ::-1], mesh.axis_names, axis_types=mesh.axis_types)

    def spec(leaf):
        target = shardings(leaf)
        if len(leaf.shape) == 2 and any(target.spec):
            return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(mirrored, target.spec))
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=target)

    template = jax.tree.map(spec, pack(model, optimizer, rngs))
    state = ocp.StandardCheckpointer().restore(path, template)

    def moved(value):
        target = shardings(value)
        if value.sharding.is_equivalent_to(target, value.ndim):
            return value
        return jax.device_put(value, target)

    state = jax.tree.map(moved, state)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
