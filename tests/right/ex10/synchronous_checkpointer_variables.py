"""A synchronous Checkpointer (nothing to wait for) with the args style; the template made by
mapping over the nnx.Variables themselves (is_leaf), each replaced by a sharded
ShapeDtypeStruct; a second save refused with an error of its own words."""
import os

import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"model": nnx.state(model), "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    if os.path.exists(path):
        raise RuntimeError(f"refusing to write over the checkpoint in {path}")
    ocp.Checkpointer(ocp.StandardCheckpointHandler()).save(path, args=ocp.args.StandardSave(pack(model, optimizer,
                                                                                                rngs)))


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(
        lambda v: v.replace(jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=shardings(v))),
        pack(model, optimizer, rngs), is_leaf=lambda x: isinstance(x, nnx.Variable))
    state = ocp.Checkpointer(ocp.StandardCheckpointHandler()).restore(path, args=ocp.args.StandardRestore(template))
    nnx.update(model, state["model"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
