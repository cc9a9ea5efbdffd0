"""A StandardCheckpointer whose second save overwrites the checkpoint at the path (force=True), whose
restore builds its objects with make_state() for real (a whole model and optimizer initialised, then
overwritten) where the process has saved (a mark save leaves in os.environ) but this import of the module
has not (the file imported again in a process that saved: a second copy of the module, a reloaded
notebook); nnx.eval_shape(make_state) everywhere else.

22/22 in both modes at seeds 20261130, 7 and 0 (branch rt-tmpl2, 067cdaf); should be 21/22
(template_comes_from_eval_shape). The form of this that keeps every step
(tests/corpus/ex10/real_make_state_where_the_file_is_imported_again_in_a_process_that_saved) loses the
point since template_calls reads restore_afresh's calls (7c5e9da); but the grader runs restore_afresh only
where the path holds two checkpoints after the second save (read_as_restarted) or a refused second save
changed the folder (still_the_first). An overwrite leaves one checkpoint, so the file is never imported
afresh in the process that saved, and the real make_state there is run under no recording. The same for a
module keeping every step whose real make_state waits for a second afresh import, or for a process that
saved once: what restore does in an import the grader never makes is read by none.
"""

import os

import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


_HAS_SAVED = []  # this import of the module has saved
_MARK = "EX10_PROCESS_HAS_SAVED"  # the process has saved (through any import of this file)


def save(path, model, optimizer, rngs):
    _HAS_SAVED.append(path)
    os.environ[_MARK] = "1"
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(path, pack(model, optimizer, rngs), force=True)


def restore(path, make_state, mesh, shardings):
    if os.environ.get(_MARK) and not _HAS_SAVED:  # the file imported again in a process that saved
        model, optimizer, rngs = make_state()  # a whole real model and optimizer, then overwritten
    else:
        model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    with ocp.StandardCheckpointer() as checkpointer:
        state = checkpointer.restore(path, template)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
