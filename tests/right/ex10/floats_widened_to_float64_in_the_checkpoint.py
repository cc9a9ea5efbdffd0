"""Every floating-point leaf written to the checkpoint widened to float64 (NumPy arrays on the host at
save, an archival copy with room to spare; float32 -> float64 is exact), the template float32 as
make_state's leaves are: Orbax casts each shard back to float32 as it reads it onto its device, so the
restored state is bit for bit the saved one. Otherwise the reference's pack, save and restore.
22/22 in both modes (with and without --sandbox) at seeds 20261130, 7 and 0.
"""
import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def _wide(leaf):
    if hasattr(leaf, "dtype") and jax.numpy.issubdtype(leaf.dtype, jax.numpy.floating):
        return np.asarray(jax.device_get(leaf), np.float64)
    return leaf


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, jax.tree.map(_wide, pack(model, optimizer, rngs)))
    checkpointer.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    state = ocp.StandardCheckpointer().restore(path, template)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
