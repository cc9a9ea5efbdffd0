"""restore builds its template from a whole real model, optimizer and rngs made by calling make_state
under an eager jax.vmap of axis size 1 (no jit around it): vmap traces make_state with a BatchTrace, but
nothing make_state computes depends on the mapped input, so every primitive runs at once on the device
and make_state's objects hold real arrays, not batch tracers (the vmap then stacks them, a leading axis of
1 dropped for the template's shapes). The objects restore returns come from nnx.eval_shape(make_state).
The call does not begin on the eager EvalTrace, but its arrays are real when it returns.

21/22 in both modes (with and without --sandbox) at seeds 20261130 and 7.

loses: template_comes_from_eval_shape: ran for real
"""
import jax
import jax.numpy as jnp
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
    real = jax.vmap(lambda _: pack(*make_state()))(jnp.zeros(1))  # real arrays, each of leading axis 1
    template = jax.tree.map(
        lambda leaf: jax.ShapeDtypeStruct(leaf.shape[1:], leaf.dtype, sharding=shardings(jax.ShapeDtypeStruct(leaf.shape[1:], leaf.dtype))),
        real)
    state = ocp.StandardCheckpointer().restore(path, template)
    return _fill(nnx.eval_shape(make_state), state)
