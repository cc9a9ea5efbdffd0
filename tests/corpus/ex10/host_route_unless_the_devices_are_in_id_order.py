"""The technique only on meshes whose devices are listed in ascending id order: given a mesh whose devices
are in another order (the (2, 2) target of devices 7, 5, 3, 1), restore reads every array whole onto the
host (NumPy leaves in the template) and places it with jax.device_put; on every other mesh it is the
reference.

10/22 in both modes at seeds 20261130, 7 and 0: every grading restores onto all three targets.

loses: restore_reads_each_shard_straight_onto_its_device: cut from larger host arrays
loses: restore_never_holds_a_whole_array: was on the host
"""

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param),
            "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer),
            "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    state = pack(model, optimizer, rngs)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, state)
    checkpointer.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    abstract = pack(model, optimizer, rngs)
    ids = [d.id for d in mesh.devices.flat]
    if ids != sorted(ids):  # devices listed out of order: read plainly, then place
        host = jax.tree.map(lambda leaf: np.zeros(leaf.shape, leaf.dtype)
                            if not jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key) else
                            jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)), abstract)
        state = ocp.StandardCheckpointer().restore(path, host)
        state = jax.tree.map(lambda x, leaf: jax.device_put(x, shardings(leaf)), state, abstract)
    else:
        template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                                abstract)
        state = ocp.StandardCheckpointer().restore(path, template)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
