"""restore traces make_state with jax.make_jaxpr (a trace only), then runs the traced program inside a
jax.jit (jax.core.eval_jaxpr of it, compiled and called): every array of a whole real model and optimizer
is made on the device before a byte is read, and the template takes those arrays' shapes and dtypes with
shardings(leaf); the objects restore returns come from nnx.eval_shape(make_state). The jitted twin of
tests/open/ex10/wrong_template_from_traced_program_run_eagerly: re-binding the traced equations inside a
jit keeps their name scopes, so the compiled program holds make_state's equations.

21/22 in both modes (with and without --sandbox) at seeds 20261130, 7 and 0.

loses: template_comes_from_eval_shape: compiled to run
"""
import jax
import orbax.checkpoint as ocp
from flax import nnx

from reference.ex10_orbax_resume import pack, save  # noqa: F401  (right as they are)


def _fill(objects, state):
    model, optimizer, rngs = objects
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs


def restore(path, make_state, mesh, shardings):
    closed, shape = jax.make_jaxpr(lambda: pack(*make_state()), return_shape=True)()
    real = jax.jit(lambda: jax.core.eval_jaxpr(closed.jaxpr, closed.consts))()  # compiled and run: real arrays
    real = jax.tree.unflatten(jax.tree.structure(shape), real)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)), real)
    state = ocp.StandardCheckpointer().restore(path, template)
    return _fill(nnx.eval_shape(make_state), state)
