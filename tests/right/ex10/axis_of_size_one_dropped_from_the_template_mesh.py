"""Meshes with an axis of size one handled differently: on such a mesh (the (1, 4) one) restore drops that
axis, and the template's shardings are the same partition specs on a one-axis mesh of the same devices in
the same order (equivalent placements); on every other mesh it uses shardings(leaf) as given.
"""

import jax
import orbax.checkpoint as ocp
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param),
            "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer),
            "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()


def squeezed(mesh):
    """The mesh without its axes of size one (the same devices in the same order), or None if it has none."""
    kept = [i for i, n in enumerate(mesh.devices.shape) if n != 1]
    if len(kept) == mesh.devices.ndim:
        return None
    devices = mesh.devices.reshape([mesh.devices.shape[i] for i in kept])
    return Mesh(devices, tuple(mesh.axis_names[i] for i in kept), axis_types=tuple(mesh.axis_types[i] for i in kept))


def placement(mesh, shardings):
    """leaf -> where it goes: shardings(leaf), on the squeezed mesh where `mesh` has an axis of size one."""
    small = squeezed(mesh)
    if small is None:
        return shardings

    def on_small(leaf):
        spec = shardings(leaf).spec
        dropped = set(mesh.axis_names) - set(small.axis_names)
        return NamedSharding(small, P(*(None if axis in dropped else axis for axis in spec)))
    return on_small


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    where = placement(mesh, shardings)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=where(leaf)),
                            pack(model, optimizer, rngs))
    state = ocp.StandardCheckpointer().restore(path, template)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
