"""WRONG: tests/corpus/ex10/refused_save_points_latest_at_the_second_state (a second save writes the second
state to path/step-1, points path/LATEST at it, then raises FileExistsError; the process that saved reads
step-0 back, a job restarted after the refusal reads the second state), with one more thing done at the
refusal: an empty file named <step folder>.grader beside each step folder. That was the name the judge's
rewrite of the folder (checks.rewritten: each item written again at item + ".grader", then renamed) wrote
to, so the rewrite failed, restored_afresh returned None and still_the_first skipped the restarted job's
reading without a word (read_as_restarted, after an overwrite, skipped the same way).

Was 22/22 in both modes (with and without --sandbox) at seeds 20261130, 7 and 0 (the original loses
saving_twice_is_an_error_or_an_overwrite, 21/22): the rewrite failed on the file in its way, and the
restarted job's reading was skipped.

Since the grader's fix the rewrite writes each item at a name of its own drawn afresh each time (a random
suffix), which no file the learner's code left can hold: 21/22 in both modes at seeds 20261130, 7 and 0.

loses: saving_twice_is_an_error_or_an_overwrite: as the refused save was given them
"""

import os

import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


_WRITTEN = {}  # path -> the step folder this process's last successful save wrote


def save(path, model, optimizer, rngs):
    os.makedirs(path, exist_ok=True)
    n = len([name for name in os.listdir(path) if name.startswith("step-") and os.path.isdir(os.path.join(path, name))])
    where = os.path.join(path, f"step-{n}")
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(where, pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()
    with open(os.path.join(path, "LATEST"), "w") as f:
        f.write(f"step-{n}")
    if n > 0:
        # A marker beside every step folder: a name the judge's rewrite of the folder writes to.
        for name in os.listdir(path):
            if name.startswith("step-") and not name.endswith(".grader"):
                open(os.path.join(path, name + ".grader"), "w").close()
        raise FileExistsError(f"a checkpoint already exists at {path}")
    _WRITTEN[path] = where


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    where = _WRITTEN.get(path)
    if where is None or not os.path.isdir(where):
        with open(os.path.join(path, "LATEST")) as f:
            where = os.path.join(path, f.read().strip())
    state = ocp.StandardCheckpointer().restore(where, template)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
