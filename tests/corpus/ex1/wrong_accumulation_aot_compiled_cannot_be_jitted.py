"""WRONG: accum_token_weighted is a jax.stages.Compiled call (the reference's scan, compiled ahead of
time from abstract shapes per argument types and n_micro, m passed by keyword). Called eagerly it
returns the right gradient, but the exercise asks that it also runs under jax.jit, and jax.jit of it
raises TypeError ("Cannot apply JAX transformations to a function lowered and compiled for a
particular signature").

Scored 16/16 with and without --sandbox, seeds 20261130, 7 and 0: while a probe runs, every Compiled
made meanwhile and called with tracers is bound as the jit it was compiled from
(program.compiled_calls_traced), which JAX itself never does, so runs_under_jit passes. Should lose
runs_under_jit at least (7/16 at 67c386f, where every check that traces it failed).

Now 7/16 at seed 20261130 without --sandbox (a Compiled is traced as its jit only where it is called at the top level of the step a training loop calls, not inside the learner's own jit, grad, scan or shard_map, where a real run refuses it too: program.compiled_calls_traced, probes.step_maker).

loses: runs_under_jit: lowered and compiled
"""

import jax
import jax.numpy as jnp
from jax import lax


def tok_loss_sum_count(w, x, y, m):
    per_token = (jnp.tanh(x @ w) - y) ** 2
    return jnp.sum(per_token * m), jnp.sum(m)


def _accum(w, x, y, *, m, n_micro):
    def split(a):
        return a.reshape(n_micro, a.shape[0] // n_micro, *a.shape[1:])

    def body(carry, micro):
        grad_sum, count = carry
        grad, n = jax.grad(tok_loss_sum_count, has_aux=True)(w, *micro)
        return (grad_sum + grad, count + n), None

    init = (jnp.zeros_like(w), jnp.zeros((), w.dtype))
    (grad_sum, count), _ = lax.scan(body, init, (split(x), split(y), split(m)))
    return grad_sum / count


_JITTED = jax.jit(_accum, static_argnames="n_micro")
_COMPILED = {}


def _spec(a):
    a = jnp.asarray(a) if not hasattr(a, "aval") and not hasattr(a, "shape") else a
    return jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a))


def accum_token_weighted(w, x, y, m, n_micro):
    specs = tuple(_spec(a) for a in (w, x, y, m))
    key = (tuple((s.shape, s.dtype) for s in specs), n_micro)
    if key not in _COMPILED:
        w_s, x_s, y_s, m_s = specs
        _COMPILED[key] = _JITTED.trace(w_s, x_s, y_s, m=m_s, n_micro=n_micro).lower().compile()
    return _COMPILED[key](w, x, y, m=m)
