"""Each shard read onto the wrong device and carried to its device through the host, one block at a
time: tests/corpus/ex10/shards_read_on_mirrored_mesh_then_device_put with the move done by hand. The
template gives each split leaf the spec shardings(leaf) asks for, on a mesh of the same devices in
reverse order, so Orbax reads every block onto the device that should hold the mirrored one; restore
then copies each block to the host (np.asarray(shard.data)), sends it to the device that should hold it
(jax.device_put(block, device)) and assembles the array with jax.make_array_from_single_device_arrays.
No array is ever whole anywhere, but every block of every split leaf is read onto another device and
moved afterwards, twice the traffic of a sharded read.

11/22 at seeds 20261130 and 7: a shard taken out to the host (shard.data), then shards placed again, came from the host (22/22 before).

technique: none
loses: restore_reads_each_shard_straight_onto_its_device: shards of the restored arrays were copied from the devices onto the host
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


def _key(index):
    return tuple((s.start, s.stop) for s in index)


def _carried(value, target):
    """value's blocks, read onto the wrong devices, each carried through the host to its own device."""
    blocks = {_key(shard.index): np.asarray(shard.data) for shard in value.addressable_shards}
    arrays = [jax.device_put(blocks[_key(index)], device)
              for device, index in target.devices_indices_map(value.shape).items()]
    return jax.make_array_from_single_device_arrays(value.shape, target, arrays)


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    mirrored = Mesh(np.asarray(mesh.devices)[::-1, ::-1], mesh.axis_names, axis_types=mesh.axis_types)

    def spec(leaf):
        target = shardings(leaf)
        if len(leaf.shape) == 2 and any(target.spec):
            return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(mirrored, target.spec))
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=target)

    state = ocp.StandardCheckpointer().restore(path, jax.tree.map(spec, pack(model, optimizer, rngs)))

    def placed(value):
        target = shardings(value)
        if value.sharding.is_equivalent_to(target, value.ndim):
            return value
        return _carried(value, target)

    state = jax.tree.map(placed, state)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
