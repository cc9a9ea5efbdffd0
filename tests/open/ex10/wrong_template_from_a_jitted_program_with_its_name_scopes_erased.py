"""WRONG (a real model made to learn the template, its equations stripped of their names): restore traces
make_state with jax.make_jaxpr, replaces every top-level equation's source_info with one whose name stack is
empty, and runs that program inside a jax.jit (jax.core.eval_jaxpr of it, compiled and called): every array
of a whole real model and optimizer is made on the device before a byte is read. The template takes those
arrays' shapes and dtypes with shardings(leaf); the returned objects come from nnx.eval_shape(make_state).

Scored 22/22 in both modes (with and without --sandbox) at seeds 20261130, 7 and 0.
Should score: 21/22 (loses template_comes_from_eval_shape, as
tests/corpus/ex10/template_from_a_traced_program_run_by_jit does: the same module without the erasure).
The judge finds make_state's equations in a compiled program by the named scope each call of its make_state
opens (probes.MAKE_STATE_SCOPE); a program whose equations no longer carry that scope is compiled and run
unmarked, and make_state's call returned tracers (not "concrete"). The marker lives in the learner's own
objects, which the learner may rewrite. Low severity (1 point; the erasure is deliberate, a forged marker).
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


def _fill(objects, state):
    model, optimizer, rngs = objects
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
from jax._src import source_info_util


def _unnamed(jaxpr):
    eqns = [e.replace(source_info=e.source_info.replace(name_stack=source_info_util.NameStack())) for e in jaxpr.eqns]
    return jaxpr.replace(eqns=eqns)


def restore(path, make_state, mesh, shardings):
    closed, shape = jax.make_jaxpr(lambda: pack(*make_state()), return_shape=True)()
    plain = _unnamed(closed.jaxpr)
    real = jax.jit(lambda: jax.core.eval_jaxpr(plain, closed.consts))()  # compiled and run: real arrays
    real = jax.tree.unflatten(jax.tree.structure(shape), real)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)), real)
    state = ocp.StandardCheckpointer().restore(path, template)
    return _fill(nnx.eval_shape(make_state), state)
