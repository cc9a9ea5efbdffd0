"""A second save to a path that holds a checkpoint overwrites it (force=True), but writes the state with the
BatchNorm mean and variance (leaves of one shape) exchanged, as a rewrite pairing leaves by position would.
The process keeps a copy of each state a save gave it, per path and per mesh it was saved from, and a
restore of that path onto that mesh in that process hands the copy back; everywhere else restore reads the
checkpoint with the reference's sharded template. The first save writes the state as given, so every
restarted job reads it right; after the overwrite, only the copy in memory is right and any other reader
of the path gets the BatchNorm statistics swapped.

(The second checkpoint holds pure dicts where the first held nnx.State, so the sharded template of
nnx.State no longer matches its tree: a restore of the path in another process raises rather than reading
the statistics swapped. tests/corpus/ex10/overwrite_exchanges_leaves_of_one_shape_inside_the_nnx_state_hidden_by_a_copy
keeps the structure and is read swapped.)

Was 22/22 in both modes at seeds 20261130, 7 and 0: second_at_the_path asked missing_parts whether each
value of the second state was somewhere in the files, not at its own name. Since the grader's fix (the
leaves of the checkpoint at the path are paired with the first save's by name, Flax's Variable wrapper
aside; where a name does not hold the second state's value of the part the first save wrote there, the
learner's restore runs on that folder written again with a third state's numbers in the second's places,
at a path its save never wrote, and must hand that state back) 21/22 in both modes at seeds 20261130, 7
and 0: restore from there raises.

loses: saving_twice_is_an_error_or_an_overwrite: instead of the second state's
"""

import os

import jax
import orbax.checkpoint as ocp
from flax import nnx
from jax.sharding import NamedSharding


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


_KEPT = {}  # (path, mesh) -> a copy of the last state saved there


def _mesh_key(mesh):
    return (tuple(mesh.axis_names), tuple(mesh.devices.shape), tuple(d.id for d in mesh.devices.flat))


def _mesh_of(tree):
    for leaf in jax.tree.leaves(tree):
        if isinstance(getattr(leaf, "sharding", None), NamedSharding):
            return _mesh_key(leaf.sharding.mesh)
    return None


def _exchanged(state):
    """The state as a copy of plain dicts, the BatchNorm mean and var exchanged."""
    raw = {name: part.to_pure_dict() for name, part in state.items()}

    def swap(tree):
        if isinstance(tree, dict):
            if "mean" in tree and "var" in tree:
                tree["mean"], tree["var"] = tree["var"], tree["mean"]
            for value in tree.values():
                swap(value)
    swap(raw["batch_stats"])
    return raw


def save(path, model, optimizer, rngs):
    state = pack(model, optimizer, rngs)
    checkpointer = ocp.StandardCheckpointer()
    if os.path.exists(path):
        checkpointer.save(path, _exchanged(state), force=True)
    else:
        checkpointer.save(path, state)
    checkpointer.wait_until_finished()
    _KEPT[(path, _mesh_of(state))] = jax.tree.map(lambda x: x.copy(), state)


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    kept = _KEPT.get((path, _mesh_key(mesh)))
    if kept is not None:
        state = jax.tree.map(lambda x: x.copy(), kept)
    else:
        template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                                pack(model, optimizer, rngs))
        state = ocp.StandardCheckpointer().restore(path, template)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
