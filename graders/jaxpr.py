"""Reading a traced program: which primitives it holds, including inside scans, checkpoints,
shard_maps and jits (every sub-jaxpr is walked)."""

from collections.abc import Callable, Iterator

import jax
from jax.extend.core import jaxprs_in_params

# Several user-facing names bind to one primitive; a check asks for the idea, not the spelling.
ALIASES: dict[str, frozenset[str]] = {
    # jax.checkpoint, jax.remat, nnx.remat and nn.checkpoint all bind `remat2` in JAX 0.12
    "checkpoint": frozenset({"remat2", "checkpoint", "remat"}),
    "scan": frozenset({"scan"}),
    "shard_map": frozenset({"shard_map"}),
    "dot": frozenset({"dot_general"}),
    "jit": frozenset({"pjit", "jit", "closed_call"}),
}


def trace(fn: Callable, *args, **kwargs):
    """The jaxpr of fn(*args); exceptions are the learner's and propagate to the plugin."""
    return jax.make_jaxpr(fn)(*args, **kwargs).jaxpr


def _names(kind: str) -> frozenset[str]:
    return ALIASES.get(kind, frozenset({kind}))


def sub_jaxprs(eqn) -> Iterator:
    yield from jaxprs_in_params(eqn.params)


def walk(jaxpr) -> Iterator:
    """Every equation of jaxpr and of all the jaxprs nested in it, depth first."""
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in sub_jaxprs(eqn):
            yield from walk(sub)


def inside(eqn) -> Iterator:
    """Every equation nested inside one equation (e.g. the body of a scan)."""
    for sub in sub_jaxprs(eqn):
        yield from walk(sub)


def is_a(eqn, kind: str) -> bool:
    """Whether the equation binds one of the primitives of `kind` (e.g. "checkpoint")."""
    return eqn.primitive.name in _names(kind)


def find(jaxpr, kind: str) -> list:
    return [e for e in walk(jaxpr) if is_a(e, kind)]


def count(jaxpr, kind: str) -> int:
    return len(find(jaxpr, kind))


def count_inside(eqn, kind: str) -> int:
    return sum(is_a(e, kind) for e in inside(eqn))


def scan_lengths(jaxpr) -> list[int]:
    return [e.params["length"] for e in find(jaxpr, "scan")]


def primitive_names(jaxpr) -> set[str]:
    return {e.primitive.name for e in walk(jaxpr)}


def walk_nested(jaxpr, outer: tuple = ()) -> Iterator[tuple]:
    """(eqn, the equations enclosing it, outermost first) for every equation, sub-jaxprs included:
    tells e.g. which scans a checkpoint sits in, and what runs inside that checkpoint."""
    for eqn in jaxpr.eqns:
        yield eqn, outer
        for sub in sub_jaxprs(eqn):
            yield from walk_nested(sub, outer + (eqn,))


# Call-like primitives whose body is inlined by `flatten`, so a jitted function's work is visible
# at the top level next to the code that calls it.
_INLINED = frozenset({"pjit", "jit", "closed_call", "core_call"})


def _evaluate_inlining(jaxpr, consts, args) -> list:
    env = {}

    def read(v):
        return v.val if isinstance(v, jax.extend.core.Literal) else env[v]

    env.update(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        if eqn.primitive.name in _INLINED:
            sub = eqn.params["jaxpr"]
            outs = _evaluate_inlining(sub.jaxpr, sub.consts, invals)
        else:
            outs = eqn.primitive.bind(*invals, **eqn.primitive.get_bind_params(eqn.params))
            if not eqn.primitive.multiple_results:
                outs = [outs]
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]


def flatten(fn: Callable, *args):
    """fn's program with its jit calls inlined and its dead code removed: (jaxpr, consts).

    Dead-code removal is JAX's own (`dce_jaxpr`): it drops exactly the equations, scan carries and
    scan outputs that no returned value depends on, and keeps everything that does, even a
    `* 0`. So what is left is what the result is computed from, but not yet how much each part
    contributes; a check that needs that evaluates the program (see test_ex1 for an example).
    """
    from jax._src.interpreters import partial_eval as pe

    traced = jax.make_jaxpr(fn)(*args)
    inlined = jax.make_jaxpr(lambda *a: _evaluate_inlining(traced.jaxpr, traced.consts, a))(*args)
    live, _ = pe.dce_jaxpr(inlined.jaxpr, [True] * len(inlined.jaxpr.outvars), instantiate=True)
    return live, inlined.consts
