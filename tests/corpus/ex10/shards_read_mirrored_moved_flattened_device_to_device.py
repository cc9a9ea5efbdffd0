"""Each shard read onto the wrong device and moved device to device afterwards, flattened for the
trip: tests/corpus/ex10/shards_read_on_mirrored_mesh_then_device_put with each block moved by hand.
The template gives each split leaf the spec shardings(leaf) asks for, on a mesh of the same devices
in reverse order, so Orbax reads every block onto the device that should hold the mirrored one;
restore then flattens each block where it lies (an eager reshape on its device), copies the flat
block to the device that should hold it (jax.device_put(flat, device): a device-to-device copy),
reshapes it back there and assembles the array with jax.make_array_from_single_device_arrays.

11/22 at seeds 20261130 and 7: a block copied between devices flattened to one dim is judged as the block (22/22 before).

technique: none
loses: restore_reads_each_shard_straight_onto_its_device: pieces of the split arrays were copied from one device to another
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


def _moved(value, target):
    """value's blocks, read onto the wrong devices, each copied flat to its own device."""
    blocks = {_key(shard.index): shard.data for shard in value.addressable_shards}
    arrays = []
    for device, index in target.devices_indices_map(value.shape).items():
        block = blocks[_key(index)]
        arrays.append(jax.device_put(block.reshape(-1), device).reshape(block.shape))
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
        return _moved(value, target)

    state = jax.tree.map(placed, state)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
