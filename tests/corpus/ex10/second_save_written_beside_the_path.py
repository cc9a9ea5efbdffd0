"""A second save to the same path silently written beside it: save writes the state with
StandardCheckpointer at `path`, or, when `path` already holds a checkpoint, at `path`.1 (then .2, ...)
without a word; restore(path) reads the newest of path, path.1, ... with the reference's sharded template.
The folder at `path` keeps the first checkpoint: any other reader of `path` (a job with this package's
restore from a fresh copy of the folder, Orbax's own tools, the grader's StandardCheckpointer) gets the
first state, and the second save left it there silently, which the stub forbids ("never leave the old
one silently").

Was 22/22 in both modes at seeds 20261130 and 7: saving_twice_is_an_error_or_an_overwrite read only what
the learner's own restore reads after the second save, never the folder at `path`. Since the grader's
fix (after a second save that raised nothing, the judge reads the files under the path with its own
StandardCheckpointer, which must hold the second state's parameters) 21/22 in both modes at seeds
20261130, 7 and 0.

loses: saving_twice_is_an_error_or_an_overwrite: a copy kept in memory, or a checkpoint written beside it
"""
import os

import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def _versions(path):
    found, n = [], 0
    while os.path.exists(path if n == 0 else f"{path}.{n}"):
        found.append(path if n == 0 else f"{path}.{n}")
        n += 1
    return found


def save(path, model, optimizer, rngs):
    path = os.fspath(path)
    n = len(_versions(path))
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path if n == 0 else f"{path}.{n}", pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    state = ocp.StandardCheckpointer().restore(_versions(os.fspath(path))[-1], template)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
