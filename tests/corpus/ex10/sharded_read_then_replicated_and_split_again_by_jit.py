"""Every split array whole on every device for a moment: restore reads the checkpoint with the
reference's sharded nnx.eval_shape template, then puts the state through a jitted identity whose
out_shardings replicate every leaf on the mesh (an all-gather: each device holds each whole kernel and its
moments), and then through a second jitted identity whose out_shardings are shardings(leaf), which splits
them again. What it returns is placed and valued right, but each device received the other devices' shards
and held every split array whole, which the stub forbids ("nothing goes to other devices, nothing is moved
afterwards, and no split array is ever whole on one device"); the moves run inside XLA programs, not
through jax.device_put.

10/22 at seeds 20261130 and 7 in both modes: the collectives of the programs compiled while restore runs are read (22/22 before).

technique: none
loses: restore_reads_each_shard_straight_onto_its_device: compiled programs moved data between devices (all-gather
loses: restore_never_holds_a_whole_array: a compiled program gathered the whole
"""
import jax
import orbax.checkpoint as ocp
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    abstract = pack(model, optimizer, rngs)
    wanted = jax.tree.map(lambda leaf: shardings(leaf), abstract)
    template = jax.tree.map(lambda leaf, s: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=s), abstract, wanted)
    read = ocp.StandardCheckpointer().restore(path, template)
    everywhere = jax.tree.map(lambda s: NamedSharding(mesh, P()), wanted)
    whole = jax.jit(lambda tree: tree, out_shardings=everywhere)(read)
    state = jax.jit(lambda tree: tree, out_shardings=wanted)(whole)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
