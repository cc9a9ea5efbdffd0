"""A CheckpointManager keeping every step (tests/right/ex10/manager_keeps_every_step_a_new_step_each_save)
whose restore builds its objects with make_state() for real (a whole model and optimizer initialised,
then overwritten) where the process has saved (a mark save leaves in os.environ) but this import of the
module has not (the file imported again in a process that saved: a second copy of the module, a
reloaded notebook); nnx.eval_shape(make_state) everywhere else.

22/22 in both modes while template_comes_from_eval_shape did not read the restore from the file
imported afresh in the process that saved (restore_afresh, which read_as_restarted runs because the
path holds two checkpoints after the second save); it reads that restore's calls too now.

loses: template_comes_from_eval_shape: in your file imported afresh in the process that saved
"""

import os

import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def _manager(path):
    return ocp.CheckpointManager(path, options=ocp.CheckpointManagerOptions(max_to_keep=None, create=True))


_HAS_SAVED = []  # this import of the module has saved
_MARK = "EX10_PROCESS_HAS_SAVED"  # the process has saved (through any import of this file)


def save(path, model, optimizer, rngs):
    _HAS_SAVED.append(path)
    os.environ[_MARK] = "1"
    with _manager(path) as manager:
        latest = manager.latest_step()
        step = 0 if latest is None else latest + 1
        if not manager.save(step, args=ocp.args.StandardSave(pack(model, optimizer, rngs))):
            raise RuntimeError(f"the checkpoint manager at {path} did not save step {step}")
        manager.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    if os.environ.get(_MARK) and not _HAS_SAVED:  # the file imported again in a process that saved
        model, optimizer, rngs = make_state()  # a whole real model and optimizer, then overwritten
    else:
        model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    with _manager(path) as manager:
        state = manager.restore(manager.latest_step(), args=ocp.args.StandardRestore(template))
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
