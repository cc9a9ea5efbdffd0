"""A CheckpointManager whose latest step is named in a plain text file: save files the whole state (the
reference's pack, StandardSave) under the step number int(optimizer.step) in an ocp.CheckpointManager with
`path` as its directory, waits for it, then writes a LATEST file beside the step folders holding that
number as text (the pointer file a job reads to find where to resume, as TensorFlow's `checkpoint` file);
a save the manager would skip (a step it already has) raises. restore reads the step number from LATEST and
restores that step with the reference's sharded nnx.eval_shape template.

Scored 11/22 in both modes (with and without --sandbox) at seeds 20261130 and 7: loses
restore_reads_each_shard_straight_onto_its_device ("restore from there raised: ... Must provide args of type
Composite ..." at the path save never wrote: Orbax's error for a step folder that is not there).
Should score: 22/22. The grader's rewrite moves the step folder's number (4 -> 11 at seed 20261130) and the
integers of JSON dicts and lists, but LATEST holds "4" as plain text (json.loads gives a bare int, which
checks.counted_on leaves alone), so the rewritten folder names a step it no longer has: the rewrite, not the
restore, made the checkpoint inconsistent. A restarted job finds LATEST and the step folder agreeing.
Grade: put this file as ex10_orbax_resume.py in a folder D;
.venv/bin/python -m graders ex10 --solutions D -v --seed 20261130 [--sandbox]
"""
import os

import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    step = int(optimizer.step.get_value())
    with ocp.CheckpointManager(path) as manager:
        if not manager.save(step, args=ocp.args.StandardSave(pack(model, optimizer, rngs))):
            raise FileExistsError(f"a checkpoint of step {step} already exists in {path}")
        manager.wait_until_finished()
    with open(os.path.join(path, "LATEST"), "w") as f:
        f.write(f"{step}\n")


def restore(path, make_state, mesh, shardings):
    with open(os.path.join(path, "LATEST")) as f:
        step = int(f.read().strip())
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    with ocp.CheckpointManager(path) as manager:
        state = manager.restore(step, args=ocp.args.StandardRestore(template))
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
