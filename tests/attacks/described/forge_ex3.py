"""Exercise 3: the technique described, not done. At import the module replaces each of the probes
that send the learner's programs (programs, auto_gradient_program, fresh_program) with one that
sends what the probes of a correct solution once sent: the loss summarised as a shard_map's own
output, P() out, both weights entering P('fsdp', None) and all_gathered over 'fsdp', a pmean
over 'fsdp' that the batch flows into; the module's own (right) losses and gradients; gradients
laid out by rows; a compiled gradient with a 1/n share of the FLOPs, gathers and reduce-scatters
of the right sizes. It also replaces summarize, the reading the judge does, in its own process.
The judge rebuilds programs, never descriptions: none of this is read."""


def _described(n, p, x, y, sol):
    import jax
    import numpy as np
    rows = {"text": "P('fsdp', None)", "parts": ["fsdp", None], "unreduced": [], "reduced": []}
    gather = {"function": "lax.all_gather", "axes": ("fsdp",)}
    read = {"outputs": 1, "made_by": "shard_map", "is_shard_map": True, "index": 0,
            "out_spec": {"text": "P()", "parts": [], "unreduced": [], "reduced": []},
            "entering": [{"input": i, "made_by": None, "shape": tuple(a.shape), "in_spec": rows}
                         for i, a in enumerate((p["w1"], p["w2"], x, y))],
            "collectives": [dict(gather, inputs=[0]), dict(gather, inputs=[1]),
                            {"function": "lax.psum", "axes": ("fsdp",), "inputs": [0, 1, 2, 3]}]}
    loss, grads = jax.value_and_grad(sol._loss)({k: np.float32(v) for k, v in p.items()},
                                               np.float32(x), np.float32(y))
    weights = sum(np.size(v) for v in p.values())
    return {"read": read, "loss": np.asarray(loss), "type": "dict", "grads": {k: np.asarray(v) for k, v in grads.items()},
            "flops": 6.0 * len(x) * sum(np.size(v) for v in p.values()) / n,
            "collectives": {"all-gather": 2, "reduce-scatter": 2, "all-reduce": 0},
            "all_reduce_sizes": [], "all_gather_elements": [weights], "reduce_scatter_elements": [weights // n],
            "is_shard_map": True}


def _with_one_free_variable(fn):
    """The probes are wrapped (their reports decorator): a code swapped in must have one free
    variable, as theirs has."""
    cell = fn

    def forged(sol, *args, **kwargs):
        cell  # noqa: B018  (the free variable)
        return sol._described(*args[:4], sol)
    return forged


def _summarize(closed):
    return {"outputs": 1, "made_by": "shard_map", "is_shard_map": True}


for _name in ("programs", "auto_gradient_program", "fresh_program"):
    _install(_name, _with_one_free_variable(_described))
_install("summarize", _summarize)
