"""A module-level checkpointing service started at import: one Orbax AsyncCheckpointer and one writer
thread (a daemon reading a queue) made when the module is imported; save hands the state to that
thread, which starts the asynchronous write, waits for it, and answers through a Future that save waits
on; restore reads through the same module-level checkpointer (StandardRestore with the reference's
sharded nnx.eval_shape template). Every import (a restarted job's too) starts its own thread."""

import queue
import threading
from concurrent.futures import Future

import jax
import orbax.checkpoint as ocp
from flax import nnx

_CHECKPOINTER = ocp.AsyncCheckpointer(ocp.StandardCheckpointHandler())
_JOBS: "queue.Queue[tuple]" = queue.Queue()


def _writer():
    while True:
        path, state, done = _JOBS.get()
        try:
            _CHECKPOINTER.save(path, args=ocp.args.StandardSave(state))
            _CHECKPOINTER.wait_until_finished()
            done.set_result(path)
        except BaseException as exc:  # handed to the caller of save
            done.set_exception(exc)


threading.Thread(target=_writer, name="ex10-checkpoint-writer", daemon=True).start()


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    done = Future()
    _JOBS.put((path, pack(model, optimizer, rngs), done))
    done.result()  # raises what the write raised (a checkpoint already there)


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    state = _CHECKPOINTER.restore(path, args=ocp.args.StandardRestore(template))
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
