"""WRONG: restore reads the checkpoint properly every time, but from its second call in a process
on it hands back a model whose Dropout is switched off (model.drop.rate = 0.0, a static attribute no
checkpoint holds), counted in a module global: training resumed after such a restore drops nothing.

Graded (both modes, seeds 20261130, 7, 0): 22/22. Before 71706f7 the experiment's restore onto the
drawn target was the forked process's second call, and the grader's training after it gave other
losses than the uninterrupted run's (21/22 at seeds 20261130, 7, 0: resumed_on_another_mesh_matches_uninterrupted). Now each restore runs in a job of its own, each the first call of its process;
the later calls are in the process that saved (_saved_again, restore_from), where what restore
returned is compared leaf by leaf and never trained. Should be 21/22."""
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
    graphdef, abstract = nnx.split(nnx.eval_shape(make_state))
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            abstract)
    with ocp.StandardCheckpointer() as checkpointer:
        state = checkpointer.restore(path, template)
    model, optimizer, rngs = nnx.merge(graphdef, state)
    if _calls[0] > 1:
        for _, module in model.iter_modules():
            if isinstance(module, nnx.Dropout):
                module.rate = 0.0
    return model, optimizer, rngs
