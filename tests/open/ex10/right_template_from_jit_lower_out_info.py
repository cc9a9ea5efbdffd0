"""The template from jax.jit(f).lower(): the function that builds and splits the state is traced and lowered
to StableHLO (never compiled, never run: no array is made), and the Lowered program's out_info gives its
output shapes and dtypes; each takes shardings(leaf); the restored state is merged with the graphdef the
trace saw.

Scored 21/22 in both modes (with and without --sandbox) at seeds 20261130 and 7: template_comes_from_eval_shape
fails with "make_state was traced into a program that was then compiled to run (1 of 1 calls) ... running
it still makes every array of a real model".
Should score: 22/22? (a policy question, low severity). Nothing is compiled or run: Lowered.out_info is
read from the StableHLO lowering, like tests/right/ex10/template_from_jit_trace_out_info's Traced.out_info
(22/22). The grader marks a call "compiled" when its program is lowered (pjit's _resolve_and_lower), which
a jit that is called and a bare .lower() share; marking it where the program is compiled (or run) would tell
them apart. If lowering is ruled out on purpose (its cost), the message should not say it ran.
Grade: put this file as ex10_orbax_resume.py in a folder D;
.venv/bin/python -m graders ex10 --solutions D -v --seed 20261130 [--sandbox]
"""
import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"state": nnx.state((model, optimizer, rngs))}


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()


def restore(path, make_state, mesh, shardings):
    graphdef = None

    def build():
        nonlocal graphdef
        graphdef, state = nnx.split(make_state())
        return state

    shapes = jax.jit(build).lower().out_info  # lowered only: shapes and dtypes, no arrays
    template = {"state": jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=shardings(s)),
                                      shapes)}
    state = ocp.StandardCheckpointer().restore(path, template)["state"]
    return nnx.merge(graphdef, state)
