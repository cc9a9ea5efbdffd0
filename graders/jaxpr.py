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


def live(jaxpr):
    """jaxpr without the equations whose results never reach an output, sub-jaxprs (jit,
    shard_map, scan bodies) included: a decoy whose result is discarded is gone."""
    from jax._src.interpreters import partial_eval as pe  # JAX's own dead-code elimination

    pruned, _ = pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars))
    return pruned


def output_source(jaxpr, index: int = 0):
    """The equation whose result is output `index` of jaxpr, looking through jit wrappers (a jit's
    output is its body's), or None for an input or a literal: says whether a primitive's result *is*
    what a function returns, rather than something added to it (e.g. `real + 0 * decoy`)."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    var = jaxpr.outvars[index]
    while True:
        eqn = next((e for e in jaxpr.eqns if any(v is var for v in e.outvars)), None)
        if eqn is None or not is_a(eqn, "jit"):
            return eqn
        position = next(i for i, v in enumerate(eqn.outvars) if v is var)
        jaxpr = getattr(eqn.params["jaxpr"], "jaxpr", eqn.params["jaxpr"])
        var = jaxpr.outvars[position]
