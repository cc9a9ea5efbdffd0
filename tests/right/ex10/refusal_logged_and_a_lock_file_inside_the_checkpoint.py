"""A right save whose refusal writes inside the checkpoint's folder: each save takes a lock file in the
path's folder while it works (path/.lock, removed when done) and appends a line to path/saves.log; a second
save to a path holding a checkpoint logs the refused attempt there and raises FileExistsError, leaving every
file of the Orbax checkpoint as it was. Restore reads the checkpoint with the reference's sharded template.

Full marks (22/22 in both modes at seeds 20261130, 7 and 0): the checkpoint at the path is untouched by the refusal; a log line and a lock taken and released
are the learner's own bookkeeping beside it.
"""

import os
import time

import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def _log(path, line):
    with open(os.path.join(path, "saves.log"), "a") as f:
        f.write(f"{time.time():.3f} {line}\n")


def save(path, model, optimizer, rngs):
    if os.path.isdir(os.path.join(path, "state")):
        lock = os.path.join(path, ".lock")
        with open(lock, "w") as f:
            f.write(str(os.getpid()))
        try:
            _log(path, "refused: a checkpoint is already here")
        finally:
            os.remove(lock)
        raise FileExistsError(f"a checkpoint already exists at {path}")
    os.makedirs(path, exist_ok=True)
    lock = os.path.join(path, ".lock")
    with open(lock, "w") as f:
        f.write(str(os.getpid()))
    try:
        checkpointer = ocp.StandardCheckpointer()
        checkpointer.save(os.path.join(path, "state"), pack(model, optimizer, rngs))
        checkpointer.wait_until_finished()
        _log(path, "saved")
    finally:
        os.remove(lock)


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    state = ocp.StandardCheckpointer().restore(os.path.join(path, "state"), template)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
