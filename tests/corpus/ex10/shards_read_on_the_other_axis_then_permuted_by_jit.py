"""Shards read onto the wrong devices, then moved by a compiled program: on a target mesh whose two axes
have the same size, restore reads each split array from the checkpoint with its split moved to the other
axis (P(None, "model") read as P(None, "data"): the same shard shapes, each landing on a device that does
not hold it in the target's layout), then moves the shards where shardings(leaf) says with a jitted identity
whose out_shardings is the target's (a collective permute on the devices). On other meshes it is the
reference. Each device first receives another device's shard and everything is moved afterwards, which the
stub forbids ("nothing goes to other devices, nothing is moved afterwards"); the move runs inside an XLA
program, not through jax.device_put.

11/22 at seeds 20261130 and 7 in both modes: the collectives of the programs compiled while restore runs are read (22/22 before).

technique: none
loses: restore_reads_each_shard_straight_onto_its_device: compiled programs moved data between devices (collective-permute
"""
import jax
import orbax.checkpoint as ocp
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()


def _swapped(sharding):
    names = list(sharding.mesh.axis_names)
    sizes = dict(sharding.mesh.shape)
    if len(names) != 2 or sizes[names[0]] != sizes[names[1]] or not any(sharding.spec):
        return sharding
    other = {names[0]: names[1], names[1]: names[0]}
    return NamedSharding(sharding.mesh, P(*[other.get(a, a) if isinstance(a, str) else a for a in sharding.spec]))


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    abstract = pack(model, optimizer, rngs)
    wanted = jax.tree.map(lambda leaf: shardings(leaf), abstract)
    template = jax.tree.map(lambda leaf, s: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=_swapped(s)),
                            abstract, wanted)
    read = ocp.StandardCheckpointer().restore(path, template)
    state = jax.jit(lambda tree: tree, out_shardings=wanted)(read)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
