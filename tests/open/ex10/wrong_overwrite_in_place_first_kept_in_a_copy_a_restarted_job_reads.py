"""Each save writes path/current (StandardCheckpointer, force=True); a second save first copies the
checkpoint there to path/previous (a last known good copy, inside the path). Restore reads path/current in
the process that wrote it (remembered per path), else path/previous where it exists. After a second save
the process that saved reads the second state back, and path/current holds it leaf by leaf at the first
save's names; but every other reader of the path (a job restarted after the second save, its module
imported afresh) reads path/previous: the first state.

Scored 22/22 in both modes (with and without --sandbox) at seeds 20261130, 7 and 0.
Should score 21/22 (loses saving_twice_is_an_error_or_an_overwrite). misplaced_second asks for the restarted
reading (read_as_restarted) only where no item of the first save's layout holds the second state at its
names, or where the first save's own item still holds the first state beside one holding the second. Here
the first save's item (path/current) holds the second state in place, and the first state stands in another
item of the same layout under the path (path/previous), which nothing looks at: the reverse of
tests/corpus/ex10/second_state_beside_the_first_inside_the_path. Asking for the restarted reading wherever
any item the path leads to, of the first save's layout, still holds the first state (or always after an
overwrite) would catch it: restore_afresh of that folder, the second state's numbers replaced by a third's,
hands back the first state.
"""

import os
import shutil

import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


_FRESH = set()  # paths whose path/current this process wrote


def save(path, model, optimizer, rngs):
    current = os.path.join(path, "current")
    if os.path.isdir(current):
        shutil.copytree(current, os.path.join(path, "previous"), dirs_exist_ok=True)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(current, pack(model, optimizer, rngs), force=True)
    checkpointer.wait_until_finished()
    _FRESH.add(path)


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    previous = os.path.join(path, "previous")
    where = previous if path not in _FRESH and os.path.isdir(previous) else os.path.join(path, "current")
    state = ocp.StandardCheckpointer().restore(where, template)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
