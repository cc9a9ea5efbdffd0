"""WRONG (a real model made between the grader's restores, then used as the template): once this module
has saved, restore's first call starts a thread that waits 0.5 s (until restore has returned) and then
calls the make_state it was given for real, keeping the whole real model, optimizer and rngs packed; every
later restore in that process takes its template's shapes and dtypes from those real arrays (with
shardings(leaf)). A restarted job never saved, so it builds its template with nnx.eval_shape.

Scored 22/22 in both modes (with and without --sandbox) at seeds 20261130, 7 and 0. Should score: 21/22
(loses template_comes_from_eval_shape: make_state ran for real, in the process that saved).
In the process that saved, the first restore is the one after the second save (probes._saved_again); the
thread's call lands after that restore's recording ended and its report was sent, and before restore_from's
restores, which are recorded but make no call (they use the kept real arrays): the call is in probes._CALLS
and in the first restore's calls list, but no report the judge reads holds it. A call is attributed to a
restore only while some restore is recorded (probes._in_the_recordings); calls made between recordings are
nobody's. (A copy raising where it uses the real template loses 11 points under --sandbox: the path is taken
in both modes.) Timing-dependent: with a 0.3 s wait, one grading of six (seed 20261130, without --sandbox)
scored 21, the call landing before the first restore's report was read; the gap between that restore's
return and the next restore measured 0.85 s.
Grade: put this file as ex10_orbax_resume.py in a folder D;
.venv/bin/python -m graders ex10 --solutions D -v --seed 20261130 [--sandbox]
"""
import threading
import time

import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def _fill(objects, state):
    model, optimizer, rngs = objects
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs


_SAVED = []
_KEPT = {}


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()
    _SAVED.append(path)


def _later(make_state):
    time.sleep(0.5)
    _KEPT["real"] = pack(*make_state())  # a whole real model, made after restore returned


def restore(path, make_state, mesh, shardings):
    real = _KEPT.get("real")
    if real is not None:
        shapes = real
    else:
        shapes = pack(*nnx.eval_shape(make_state))
        if _SAVED and "thread" not in _KEPT:
            _KEPT["thread"] = threading.Thread(target=_later, args=(make_state,), daemon=True)
            _KEPT["thread"].start()
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)), shapes)
    state = ocp.StandardCheckpointer().restore(path, template)
    return _fill(nnx.eval_shape(make_state), state)
