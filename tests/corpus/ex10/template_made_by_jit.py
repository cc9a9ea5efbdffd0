"""Builds a real, sharded model under nnx.jit (the usual way to initialise a sharded model) and uses
it as the template: every array is made before a byte is read.

loses: template_comes_from_eval_shape: traced into a program that was then compiled
"""
import jax
import orbax.checkpoint as ocp
from flax import nnx

from reference.ex10_orbax_resume import pack, save  # noqa: F401  (right as they are)


def restore(path, make_state, mesh, shardings):
    @nnx.jit
    def build():
        objects = make_state()
        state = nnx.state(objects)
        nnx.update(objects, jax.tree.map(lambda a: jax.lax.with_sharding_constraint(a, shardings(a)), state))
        return objects

    with jax.set_mesh(mesh):
        model, optimizer, rngs = build()
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    state = ocp.StandardCheckpointer().restore(path, template)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
