"""Paths spelled otherwise, and an AsyncCheckpointer: save and restore hand Orbax `path` with a trailing
slash, as an epath.Path (epath.Path(path + "/"), as a job given its checkpoint directory on the command line
may spell it); save uses an ocp.AsyncCheckpointer around a StandardCheckpointHandler (StandardSave), waits
for it and closes it; restore reads with the reference's sharded nnx.eval_shape template through
ocp.Checkpointer(ocp.StandardCheckpointHandler()) (StandardRestore), used as a context manager.

22/22 in both modes (with and without --sandbox) at seeds 20261130 and 7.
"""
import jax
import orbax.checkpoint as ocp
from etils import epath
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def _spelled(path):
    return epath.Path(str(path) + "/")


def save(path, model, optimizer, rngs):
    checkpointer = ocp.AsyncCheckpointer(ocp.StandardCheckpointHandler())
    checkpointer.save(_spelled(path), args=ocp.args.StandardSave(pack(model, optimizer, rngs)))
    checkpointer.wait_until_finished()
    checkpointer.close()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    with ocp.Checkpointer(ocp.StandardCheckpointHandler()) as checkpointer:
        state = checkpointer.restore(_spelled(path), args=ocp.args.StandardRestore(template))
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
