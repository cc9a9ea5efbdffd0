"""tests/corpus/ex10/counters_only_from_a_file_in_tmp with the file's path written out in full
("/tmp/ex10_resume_counters_only_written_out.npz") instead of taken from tempfile.gettempdir(): the
integer leaves (the optimizer's step, the schedule's counts, the dropout stream's count) are read back
from a file save leaves in the machine's /tmp, the rest from the checkpoint. A job restarted on another
machine has no such file.

4/22 in both modes (with and without --sandbox) at seeds 20261130 and 7: in the restarted job's process,
opening a file written since save began outside the checkpoint folder, under the temporary folder, the
home folder, /tmp, /var/tmp or /dev/shm, fails as a missing file does (probes.hold_back_files_written_since);
the grader moves or deletes nothing of the learner's.

loses: restore_reads_each_shard_straight_onto_its_device: save wrote it outside the checkpoint folder
loses: step_and_schedule_continue: a job restarted on another machine has no such file
"""
import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx

_SIDE = "/tmp/ex10_resume_counters_only_written_out.npz"  # not tempfile.gettempdir()


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def _is_key(leaf):
    return jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def _counter(leaf):
    return not _is_key(leaf) and not jax.numpy.issubdtype(leaf.dtype, jax.numpy.floating)


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    state = pack(model, optimizer, rngs)
    checkpointer.save(path, state)
    checkpointer.wait_until_finished()
    leaves = jax.tree_util.tree_leaves(state)
    np.savez(_SIDE, *[np.asarray(leaf)
                      for leaf in leaves if _counter(leaf)])


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    state = ocp.StandardCheckpointer().restore(path, template)
    with np.load(_SIDE) as side:  # not in the checkpoint folder: a restarted job elsewhere has none
        kept = iter([side[f"arr_{i}"] for i in range(len(side.files))])

    def from_the_file(leaf):
        if not _counter(leaf):
            return leaf
        return jax.device_put(next(kept).astype(leaf.dtype), leaf.sharding)

    state = jax.tree.map(from_the_file, state)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
