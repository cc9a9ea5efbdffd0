"""Saves the dropout stream's key but not its count: the stream restarts at count 0 and dropout
repeats the masks it drew before.

loses: dropout_stream_continues: dropout repeats the masks
"""
import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"model": nnx.state(model), "optimizer": nnx.state(optimizer), "key": rngs.dropout.key}


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    state = ocp.StandardCheckpointer().restore(path, template)
    nnx.update(model, state["model"])
    nnx.update(optimizer, state["optimizer"])
    key = state["key"]
    rngs.dropout.key.set_value(key.get_value() if hasattr(key, "get_value") else key)
    rngs.dropout.count.set_value(jax.device_put(jax.numpy.zeros((), jax.numpy.uint32), shardings(rngs.dropout.count)))
    return model, optimizer, rngs
