"""A forge of the one fact under --sandbox that no data shows: the route a restore's data took.
The module itself is tests/corpus/ex10/host_arrays_then_device_put (the reference's Orbax save; a
restore that reads every array onto the host with Orbax, NumPy arrays as the template, and places
each afterwards with jax.device_put: every number right, no sharded template), scored 10/22 when
graded honestly. At import it swaps the code of the two probes functions that run a restore under the
recording (probes._resumed, probes._restored_from) for code that runs the originals and then
replaces what was recorded with what a sharded read records: one shard-sized host piece of each
split leaf on each device of the target mesh, nothing moved between devices. The code swap leaves
every name the guard compares pointing at the object it did (tests/test_forged_evidence.py, the
`code` way).

Measured (2026-12-08, seed 20261130, `python -m graders ex10 --solutions D --sandbox -v` and without):
see tests/open/README.md. Should score 10/22, as graded honestly: everything the judge reads itself
(its own Orbax reading of the checkpoint, the values restore handed back from the judge's rewrite at
two paths, the placements described leaf by leaf) is right, and the 12 points of where the data went
(restore_reads_each_shard_straight_onto_its_device 11, restore_never_holds_a_whole_array 1) rest on
the worker's recording. No program shows the route: a right restore compiles nothing (Orbax places
each shard with device_put), and the bytes read from the checkpoint are the same either way.
"""
import sys as _sys
import types as _types

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)

    def on_host(leaf):
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            return leaf
        return np.zeros(leaf.shape, leaf.dtype)

    state = ocp.StandardCheckpointer().restore(path, jax.tree.map(on_host, pack(model, optimizer, rngs)))
    state = jax.tree.map(lambda a: jax.device_put(a, shardings(a)), state)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs


# --- the forge ------------------------------------------------------------------------------

_PR = _sys.modules.get("graders.exercises.ex10_orbax_resume.probes")
# Kept on a module every import shares: the learner's file is imported afresh in the restarted jobs
# and by restore_afresh, and a second import must wrap the originals, not the wrappers.
_KEPT = _sys.modules["sys"].__dict__.setdefault("_forge_ex10_route", {})


def _perfect_pieces(config, target):
    from jax.sharding import NamedSharding
    m = _PR.mesh(target)
    pieces = []
    for _, leaf in _PR.leaves_of(nnx.eval_shape(lambda: _PR.fresh_state(config))):
        spec = _PR.spec_for(config, leaf.shape)
        if not len(spec):
            continue
        shard = tuple(int(d) for d in NamedSharding(m, spec).shard_shape(tuple(leaf.shape)))
        for device in target["devices"]:
            pieces.append({"shape": shard, "dtype": str(leaf.dtype), "backing": shard,
                           "backing_size": int(np.prod(shard)), "from_device": False, "device": int(device)})
    return pieces


def _resumed(sol, config, batches, target, path, fresh=None):
    forge = sys.__dict__["_forge_ex10_route"]
    run = forge["_resumed"](sol, config, batches, target, path, fresh)
    run["pieces"], run["moves"] = forge["pieces"](config, target), []
    return run


def _restored_from(sol, config, path, target):
    forge = sys.__dict__["_forge_ex10_route"]
    answer = forge["_restored_from"](sol, config, path, target)
    answer["pieces"], answer["moves"] = forge["pieces"](config, target), []
    return answer


if _PR is not None and not _KEPT:
    for _name, _fake in (("_resumed", _resumed), ("_restored_from", _restored_from)):
        _real = getattr(_PR, _name)
        _KEPT[_name] = _types.FunctionType(_real.__code__, _real.__globals__, _name, _real.__defaults__)
        _real.__code__ = _fake.__code__
    _KEPT["pieces"] = _perfect_pieces
