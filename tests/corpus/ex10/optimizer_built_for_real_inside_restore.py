"""The optimizer built for real inside restore, its state then overwritten by the checkpoint's.
The checkpoint holds the model's state, the optimizer's state (nnx.state(optimizer): step and
opt_state) and the rngs as three items of a dict; restore makes the abstract objects with
nnx.eval_shape(make_state), reads the whole tree with the sharded template, writes the model's part into
the abstract model, then builds a fresh nnx.Optimizer(model, tx, wrt=nnx.Param) around the restored model
with the abstract optimizer's own transformation and writes the restored optimizer state into it.

11/22 in both modes (seeds 20261130, 7, 0). The fresh nnx.Optimizer's zero moments are made by optax
(zeros_like) whole on the default device and copied from there onto the mesh, 16 block-sized pieces from
device 0: on a real model, both moments of every kernel whole on one device, which the stub forbids
("no split array is ever whole on one device"); the checkpoint's moments then replace them. The check
words it as arrays restored elsewhere and moved. restore_never_holds_a_whole_array (1) stays: the whole
zero moments are made by a compiled broadcast on device 0, which no record reads.

loses: restore_reads_each_shard_straight_onto_its_device: copied from one device to another
"""
import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"model": nnx.state(model), "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, abstract_optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, abstract_optimizer, rngs))
    state = ocp.StandardCheckpointer().restore(path, template)
    nnx.update(model, state["model"])
    optimizer = nnx.Optimizer(model, abstract_optimizer.tx, wrt=nnx.Param)
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
