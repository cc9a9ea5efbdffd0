"""Saves the model and the rest as two Orbax checkpoints side by side, overwriting the first and
keeping the second when it exists: a second save to the same path leaves a mix of both states.

loses: saving_twice_is_an_error_or_an_overwrite: a mix
"""
import os

import jax
import orbax.checkpoint as ocp
from flax import nnx


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(os.path.join(path, "model"), nnx.state(model), force=True)
    rest = os.path.join(path, "rest")
    if not os.path.exists(rest):
        checkpointer.save(rest, {"optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)})
    checkpointer.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    placed = lambda tree: jax.tree.map(  # noqa: E731
        lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)), tree)
    checkpointer = ocp.StandardCheckpointer()
    nnx.update(model, checkpointer.restore(os.path.join(path, "model"), placed(nnx.state(model))))
    rest = checkpointer.restore(os.path.join(path, "rest"),
                                placed({"optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}))
    nnx.update(optimizer, rest["optimizer"])
    nnx.update(rngs, rest["rngs"])
    return model, optimizer, rngs


def pack(model, optimizer, rngs):
    return {"model": nnx.state(model), "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}
