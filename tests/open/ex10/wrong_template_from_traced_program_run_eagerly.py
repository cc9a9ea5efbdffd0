"""WRONG (a real model made to learn the template, out of the compiler's sight): restore traces make_state
with jax.make_jaxpr (a trace only: nothing lowered, compiled or run) and then evaluates the traced program
equation by equation with jax.core.eval_jaxpr, outside any jit: every op runs eagerly, so every array of a
whole model (parameters, Adam's moments, ...) is made on the devices before a byte is read, exactly what
tests/corpus/ex10/template_from_a_real_model does. The template takes those real arrays' shapes and
dtypes with shardings(leaf); the objects restore returns come from nnx.eval_shape(make_state).

Scored 22/22 in both modes (with and without --sandbox) at seeds 20261130 and 7.
Should score: 21/22 (loses template_comes_from_eval_shape, as tests/corpus/ex10/template_from_a_real_model
does). make_state's call is traced only (its kernel a tracer when it returns), and the traced program is never
lowered: eval_jaxpr runs it op by op, each eager op lowered as a small program of its own whose equations
carry no name scope. jax.checkpoint(built)() called outside jit does the same (traced, then evaluated op by
op: 22/22 at seed 20261130).
Low severity (1 point), like tests/open/ex10/wrong_template_shapes_from_a_real_model_decoy_eval_shape.
Grade: put this file as ex10_orbax_resume.py in a folder D;
.venv/bin/python -m graders ex10 --solutions D -v --seed 20261130 [--sandbox]
"""
import jax
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
    def built():
        return pack(*make_state())

    closed, shape = jax.make_jaxpr(built, return_shape=True)()
    real = jax.core.eval_jaxpr(closed.jaxpr, closed.consts)  # the program run op by op: real arrays
    real = jax.tree.unflatten(jax.tree.structure(shape), real)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)), real)
    state = ocp.StandardCheckpointer().restore(path, template)
    model, optimizer, rngs = nnx.eval_shape(make_state)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
