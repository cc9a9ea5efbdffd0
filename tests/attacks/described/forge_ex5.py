"""Exercise 5: the technique described, not done. At import the module replaces each of the probes
that read the learner's program (program, and tapped_runs where it is still there) with one that
sends what the probes of a correct solution once sent: both Dense layers and the model call live inside one remat2 that
recomputes, Linen's own, whose policy saves nothing; the output and its gradient computed from the
module's own (right) MLP, moved exactly as the taps at work ask (shifted by the shift, the gradient
scaled by the product of the scales). The judge rebuilds programs, never descriptions: none of
this is read."""


def _described_program(seed, x, features):
    remat = {"remats": [0], "recomputing": [0], "lifted": [0]}
    return {"calls": [dict(remat, role="the first Dense layer", live=True),
                      dict(remat, role="the second Dense layer", live=True),
                      dict(remat, role=None, live=True)],
            "remats": 2,
            "checkpoints": [{"saves": [], "policy": "policy=None", "bytes": 0, "everything": 25, "merged": False}]}


def _described_runs(seed, x, features, w, perturb, sol):
    import jax
    import jax.numpy as jnp
    import numpy as np

    def weighted(x):
        out = jnp.reshape(sol.nn_checkpoint_forward(seed, x, features), (-1,))
        return jnp.vdot(jnp.asarray(w, jnp.float32), out), out

    (_, out), grad = jax.value_and_grad(weighted, has_aux=True)(jnp.asarray(x, jnp.float32))
    out, grad = np.asarray(out, np.float64), np.asarray(grad, np.float64)
    shifted, scale = out.copy(), 1.0
    for shift, factor in perturb.values():
        if shift is not None:
            shifted = shifted + np.asarray(shift, np.float64)
        scale *= factor
    return {"runs": [(out, grad), (shifted, scale * grad)]}


def _with_one_free_variable(fn, name):
    """The probes are wrapped: a code swapped in must have the free variables theirs has."""
    cell = fn

    if name == "program":
        def forged(sol, *args, **kwargs):
            cell  # noqa: B018  (the free variable)
            return sol._described_program(*args[:3])
    else:
        def forged(sol, *args, **kwargs):
            cell  # noqa: B018  (the free variable)
            return sol._described_runs(*args[:5], sol)
    return forged


for _name in ("program", "tapped_runs"):
    if hasattr(_sys.modules["graders.exercises." + _MODULE + ".probes"], _name):
        _install(_name, _with_one_free_variable(None, _name))
