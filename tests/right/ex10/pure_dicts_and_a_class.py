"""Plain nested dicts (nnx.to_pure_dict) in the checkpoint, written back with
nnx.replace_by_pure_dict; the Orbax calls live in a small class, its method used as a decorator
that waits for every write."""
import functools

import jax
import orbax.checkpoint as ocp
from flax import nnx


class Store:
    def __init__(self):
        self.checkpointer = ocp.StandardCheckpointer()

    def waiting(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            out = fn(*args, **kwargs)
            self.checkpointer.wait_until_finished()
            return out
        return wrapped


STORE = Store()
PARTS = ("params", "batch_stats", "optimizer", "rngs")


def _states(model, optimizer, rngs):
    return (nnx.state(model, nnx.Param), nnx.state(model, nnx.BatchStat), nnx.state(optimizer), nnx.state(rngs))


def pack(model, optimizer, rngs):
    return {part: nnx.to_pure_dict(state) for part, state in zip(PARTS, _states(model, optimizer, rngs))}


@STORE.waiting
def save(path, model, optimizer, rngs):
    STORE.checkpointer.save(path, pack(model, optimizer, rngs))


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    as_shards = functools.partial(jax.tree.map, lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype,
                                                                                  sharding=shardings(leaf)))
    restored = STORE.checkpointer.restore(path, as_shards(pack(model, optimizer, rngs)))
    states = _states(model, optimizer, rngs)
    for part, state in zip(PARTS, states):
        nnx.replace_by_pure_dict(state, restored[part])
    nnx.update(model, states[0], states[1])
    nnx.update(optimizer, states[2])
    nnx.update(rngs, states[3])
    return model, optimizer, rngs
