"""A second save to a path that holds a checkpoint replaces it with the second state and returns: it moves
the checkpoint there aside (path + ".previous-PID"), writes the new one at the path (waited for), and
registers a rollback (atexit) that moves the old one back over the path when the process exits (meant to
run only if the new checkpoint were never confirmed, it runs always). Restore is the reference's. While the
process that saved runs, the path holds the second state; once it has exited, the first again, so a job
restarted afterwards resumes from the older state although the second save returned without an error.

22/22 in both modes at seeds 20261130, 7 and 0. Should lose saving_twice_is_an_error_or_an_overwrite
(21/22): the second save did not replace the checkpoint for good. Every reading of the path after the
second save (second_at_the_path's files, restore onto mesh A) happens in the process that saved, before it
exits. A delay instead of atexit (a thread writing the first state back with force=True 2 s later)
scored 22/22 at five of the six gradings and 11/22 at one, where the late write happened to collide with
the grader's own rewrite of that folder: caught by chance, not by a check.
"""

import atexit
import os
import shutil

import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def _rollback(path, previous):
    if os.path.isdir(previous):
        shutil.rmtree(path, ignore_errors=True)
        os.rename(previous, path)


def save(path, model, optimizer, rngs):
    path = path.rstrip("/")
    checkpointer = ocp.StandardCheckpointer()
    if os.path.exists(path):
        previous = f"{path}.previous-{os.getpid()}"
        shutil.rmtree(previous, ignore_errors=True)
        os.rename(path, previous)  # the checkpoint there, kept until the new one is confirmed
        atexit.register(_rollback, path, previous)
    checkpointer.save(path, pack(model, optimizer, rngs))
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
