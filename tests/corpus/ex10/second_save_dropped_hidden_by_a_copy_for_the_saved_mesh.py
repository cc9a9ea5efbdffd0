"""A second save silently dropped, hidden by a copy in memory: save is a CheckpointManager step at `path`
(step 0) and ignores what manager.save returns, so a second save to the same path writes nothing; the
process keeps a copy of the last state save was given (its arrays, where they lie), and a restore onto
the mesh that state was saved from, in that process, hands the copy back. Everywhere else restore reads
the checkpoint with the reference's sharded template.

Was 22/22 in both modes at seeds 20261130, 7 and 0: saving_twice_is_an_error_or_an_overwrite read only
the restore after the second save, onto mesh A in the process that saved, which the copy answers.
Since the grader's fix (after a second save that raised nothing, the judge also reads the folder's
files at the path with its own StandardCheckpointer, which must hold every part of the second state)
21/22 in both modes at those seeds; without the copy it is tests/corpus/ex10/manager_drops_a_second_save.

loses: saving_twice_is_an_error_or_an_overwrite: as the second save was given them (it still holds the first state's)
"""

import jax
import orbax.checkpoint as ocp
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param),
            "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer),
            "rngs": nnx.state(rngs)}


_LAST = {}  # path -> (the mesh it was saved from, a copy of the state save was given)


def _mesh_key(mesh):
    return (tuple(mesh.axis_names), tuple(mesh.devices.shape), tuple(d.id for d in mesh.devices.flat))


def _mesh_of(tree):
    for leaf in jax.tree.leaves(tree):
        sharding = getattr(leaf, "sharding", None)
        if isinstance(sharding, NamedSharding):
            return _mesh_key(sharding.mesh)
    return None


def save(path, model, optimizer, rngs):
    state = pack(model, optimizer, rngs)
    with ocp.CheckpointManager(path) as manager:
        manager.save(0, args=ocp.args.StandardSave(state))
        manager.wait_until_finished()
    _LAST[path] = (_mesh_of(state), jax.tree.map(lambda x: x.copy(), state))


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    kept = _LAST.get(path)
    if kept is not None and kept[0] == _mesh_key(mesh):  # still in memory, on these very devices
        state = jax.tree.map(lambda x: x.copy(), kept[1])
    else:
        template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                                pack(model, optimizer, rngs))
        with ocp.CheckpointManager(path) as manager:
            state = manager.restore(manager.latest_step(), args=ocp.args.StandardRestore(template))
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
