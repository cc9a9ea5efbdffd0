"""WRONG (low severity): restore's first call in a process takes its template from
nnx.eval_shape(make_state); every later call in the same process runs make_state() for real (a
whole model and optimizer built on the default device, then overwritten), counted in a module global.

Graded (both modes, seeds 20261130, 7, 0): 22/22. Before 71706f7 the experiment's two restores ran
one after the other in one forked process, so the one onto the drawn target was that process's
second call and template_comes_from_eval_shape saw make_state called for real (21/22). Now each
restore runs in a job of its own, each the first call of its process; the later calls happen only in
the process that saved (_saved_again, restore_from), whose make_state is not recorded. Should be 21/22."""
import jax
import orbax.checkpoint as ocp
from flax import nnx

_calls = [0]


def pack(model, optimizer, rngs):
    return nnx.split((model, optimizer, rngs))[1]


def save(path, model, optimizer, rngs):
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(path, pack(model, optimizer, rngs))


def restore(path, make_state, mesh, shardings):
    _calls[0] += 1
    objects = nnx.eval_shape(make_state) if _calls[0] == 1 else make_state()
    graphdef, abstract = nnx.split(objects)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            abstract)
    with ocp.StandardCheckpointer() as checkpointer:
        state = checkpointer.restore(path, template)
    return nnx.merge(graphdef, state)
