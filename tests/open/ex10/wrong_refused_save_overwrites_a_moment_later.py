"""A second save to a path that holds a checkpoint raises FileExistsError at once, but first hands the new
state to a background thread that overwrites the checkpoint a moment later (force=True): the error reads as
a refusal, and the path ends up holding the second state after all. Restore is the reference's.

Scored 22/22 in both modes (with and without --sandbox) at seeds 20261130, 7 and 0 (the path holds the
second state 0.3 s after save raised: checked by a restore a few seconds later).
Should score 21/22 (loses saving_twice_is_an_error_or_an_overwrite): still_the_first restores the path
right after the refusal, before the background write lands, and nothing reads the path later in that
process (the grader's rewrites are restored at another path, or at the saved path after the grader
replaced its folder). Reading the folder's files after a refusal, once they have stopped changing for
longer than a background write takes, or restoring the path again after the other probes, would catch it.
"""

import os
import threading
import time

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def _later(path, state):
    time.sleep(0.3)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, state, force=True)
    checkpointer.wait_until_finished()


def save(path, model, optimizer, rngs):
    state = pack(model, optimizer, rngs)
    if os.path.exists(path):
        host = jax.tree.map(lambda x: np.asarray(x) if not jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
                            else x, state)
        threading.Thread(target=_later, args=(path, host), daemon=True).start()
        raise FileExistsError(f"a checkpoint already exists at {path}")
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, state)
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
