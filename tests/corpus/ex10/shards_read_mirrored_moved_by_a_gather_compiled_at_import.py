"""Each shard read onto the wrong device and moved afterwards by a collective compiled at import:
tests/corpus/ex10/shards_read_on_mirrored_mesh_then_device_put with the move done by a program made
when the module is imported, jax.jit(shard_map(all_gather)).lower(...).compile() over all the
machine's devices on a fixed (devices, 4096) float32 buffer. restore reads every split leaf onto the
mirrored mesh (the same devices in reverse order), packs each device's block into its row of the
buffer (eager ops on one device, no collective), runs the compiled all-gather (every device gets
every row) and cuts from it, on each device of the target, the block that device should hold,
assembling the array with jax.make_array_from_single_device_arrays. Nothing is placed through
batched_device_put from a device, and the only program with a collective was compiled before restore
ran.

11/22 at seeds 20261130 and 7: a program compiled before restore and called while it runs (a Compiled object) is read too (22/22 before).

technique: none
loses: restore_reads_each_shard_straight_onto_its_device: compiled programs moved data between devices (all-gather
"""
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

_DEVICES = jax.devices()
_ROW = 4096
_RING = Mesh(np.array(_DEVICES), ("i",))
_ROWS = NamedSharding(_RING, P("i"))


def _everyone(block):
    return jax.lax.all_gather(block, "i", tiled=True)


_GATHER = jax.jit(jax.shard_map(_everyone, mesh=_RING, in_specs=P("i"), out_specs=P(), check_vma=False)).lower(
    jax.ShapeDtypeStruct((len(_DEVICES), _ROW), jnp.float32, sharding=_ROWS)).compile()


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
    """value's blocks, sitting on the wrong devices, brought to target's devices by the compiled gather."""
    held = {shard.device: shard.data for shard in value.addressable_shards}
    where = {_key(index): device for device, index in value.sharding.devices_indices_map(value.shape).items()}
    rows = []
    for device in _DEVICES:
        if device in held:
            flat = held[device].reshape(-1).astype(jnp.float32)
            rows.append(jnp.pad(flat, (0, _ROW - flat.size)).reshape(1, _ROW))
        else:
            rows.append(jax.device_put(np.zeros(_ROW, np.float32), device).reshape(1, _ROW))
    everyone = _GATHER(jax.make_array_from_single_device_arrays((len(_DEVICES), _ROW), _ROWS, rows))
    copies = {shard.device: shard.data for shard in everyone.addressable_shards}
    blocks = []
    for device, index in target.devices_indices_map(value.shape).items():
        source = _DEVICES.index(where[_key(index)])
        shape = tuple(len(range(*s.indices(n))) for s, n in zip(index, value.shape))
        size = int(np.prod(shape))
        blocks.append(copies[device][source, :size].reshape(shape).astype(value.dtype))
    return jax.make_array_from_single_device_arrays(value.shape, target, blocks)


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
