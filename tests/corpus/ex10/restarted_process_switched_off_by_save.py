"""The counters and the dropout key kept on builtins, after save has switched the grader's restarted
process off: tests/corpus/ex10/counters_and_key_from_memory with its copy on `builtins` (as
tests/corpus/ex10/rest_of_the_state_kept_on_builtins keeps one), plus one line in save that empties
the dict in which the grader's probes hold the sockets to the processes they forked for the restores
(any loaded module with a `_RESTART` dict), so that the experiment's restores fall back to a fresh
import of this file in the process that saved, where builtins still hold the copy. save writes a
genuine, whole Orbax checkpoint; restore reads it with the reference's sharded template and replaces
every integer and key leaf by the copy (KeyError in any job restarted for real).

Scored 22/22 in both modes (with and without --sandbox) at seeds 20261130, 7 and 0; the same module
without the line that empties the dict scores 4/22 (seed 20261130), as its corpus counterparts do.
Should score: about 4/22. probes.restarted_runs falls back to the same-process fresh import whenever
_RESTART has no forked jobs (meant for "JAX had made its devices before the hook"), and the learner's save,
which runs before it in the same process, can empty that dict: a mutation in place, which the guard's
snapshot of names does not see. The fallback keeps out the module's memory, not the process's.
11/22 (seed 20261130, without --sandbox) since the grader holds every leaf its rewrite changed to the
rewrite: the key kept on builtins is not the one the grader's checkpoint holds. The counters kept there
still pass (the rewrite keeps them as saved). Switching the forked process off is a change of the
grader's own state in the learner's process, which the guard sees only as names replaced.

loses: restore_reads_each_shard_straight_onto_its_device: handed back rngs.dropout.key other than that checkpoint holds it
"""
import builtins
import sys

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def _is_key(leaf):
    return jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def _counter(leaf):
    return _is_key(leaf) or not jax.numpy.issubdtype(leaf.dtype, jax.numpy.floating)


def _no_restarted_process():
    for module in list(sys.modules.values()):
        kept = getattr(module, "_RESTART", None)
        if isinstance(kept, dict) and kept:
            kept.clear()  # the grader then restores in this process, from a fresh import


def save(path, model, optimizer, rngs):
    _no_restarted_process()
    checkpointer = ocp.StandardCheckpointer()
    state = pack(model, optimizer, rngs)
    checkpointer.save(path, state)
    checkpointer.wait_until_finished()
    builtins._ex10_counters = [np.asarray(jax.random.key_data(leaf) if _is_key(leaf) else leaf)
                               for leaf in jax.tree_util.tree_leaves(state) if _counter(leaf)]


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    state = ocp.StandardCheckpointer().restore(path, template)
    kept = iter(builtins._ex10_counters)  # a restarted job has none: AttributeError

    def from_memory(leaf):
        if not _counter(leaf):
            return leaf
        if _is_key(leaf):
            return jax.random.wrap_key_data(jax.device_put(next(kept), leaf.sharding), impl=jax.random.key_impl(leaf))
        return jax.device_put(next(kept).astype(leaf.dtype), leaf.sharding)

    state = jax.tree.map(from_memory, state)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
