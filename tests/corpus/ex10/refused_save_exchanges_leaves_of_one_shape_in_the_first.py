"""A second save to a path that holds a checkpoint raises FileExistsError, but first rewrites the checkpoint
already there (force=True) from a raw read of it whose leaves it pairs with its tree by position: the
BatchNorm mean and variance (leaves of one shape) come back exchanged. Every value of the first state is
still in the checkpoint, under another name, and no leaf holds the second state: restore then reads the
first state with its BatchNorm statistics swapped, a damaged checkpoint.

Was 22/22 in both modes at seeds 20261130, 7 and 0: still_the_first asked only that no leaf restore read
holds the second state's value, never that it holds the first's, and missing_parts found each value of the
first state anywhere in the files, not at its own name. Since the grader's fix (after a refusal, every
array of each item the first save wrote must still hold, at its own name, what that save wrote there)
21/22 in both modes at seeds 20261130, 7 and 0.

loses: saving_twice_is_an_error_or_an_overwrite: no longer hold the first state as the first save wrote it
"""

import os

import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def _restamp(path):
    """Rewrite the checkpoint at path from a raw read (its leaves paired by position: mean and var swap)."""
    checkpointer = ocp.StandardCheckpointer()
    raw = checkpointer.restore(path)
    def swap(tree):
        if isinstance(tree, dict):
            if "mean" in tree and "var" in tree:
                tree["mean"], tree["var"] = tree["var"], tree["mean"]
            for value in tree.values():
                swap(value)
    swap(raw["batch_stats"])
    checkpointer.save(path, raw, force=True)
    checkpointer.wait_until_finished()


def save(path, model, optimizer, rngs):
    if os.path.exists(path):
        _restamp(path)
        raise FileExistsError(f"a checkpoint already exists at {path}")
    checkpointer = ocp.StandardCheckpointer()
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
