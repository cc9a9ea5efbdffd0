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
    """jaxpr without the equations no output depends on, sub-jaxprs included: a decoy computed
    and then discarded cannot pass for the technique."""
    from jax._src.interpreters import partial_eval as pe  # JAX's own dead-code elimination

    pruned, _ = pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars))
    return pruned


def depends_on(jaxpr, is_source, tainted_in=None) -> list[bool]:
    """For each output of jaxpr: whether it depends on an equation for which is_source(eqn) is
    true (or on an input marked in tainted_in). Exact through jit; a cond's outputs depend on its
    predicate; other equations with sub-jaxprs (scan, while) count as depending on everything
    they hold."""
    from jax.extend.core import Literal

    tainted = {v for v, t in zip(jaxpr.invars, tainted_in or [False] * len(jaxpr.invars)) if t}

    def hit(v):
        return not isinstance(v, Literal) and v in tainted

    for eqn in jaxpr.eqns:
        ins = [hit(v) for v in eqn.invars]
        subs = list(sub_jaxprs(eqn))
        if is_source(eqn):
            outs = [True] * len(eqn.outvars)
        elif is_a(eqn, "jit") and len(subs) == 1:
            outs = depends_on(subs[0], is_source, ins)
        elif subs:
            held = any(is_source(e) for s in subs for e in walk(s))
            outs = [any(ins) or held] * len(eqn.outvars)  # a cond's predicate is one of its inputs
        else:
            outs = [any(ins)] * len(eqn.outvars)
        tainted.update(v for v, t in zip(eqn.outvars, outs) if t)
    return [hit(v) for v in jaxpr.outvars]


def scan_carry_count(eqn) -> int:
    """How many of a scan body's outputs are the carry (they come first; the rest are the ys,
    which the scan stacks, so their outer shape has one more axis than the body's)."""
    if "num_carry" in eqn.params:  # how other JAX versions spell it
        return eqn.params["num_carry"]
    count = 0
    for outer, inner in zip(eqn.outvars, eqn.params["jaxpr"].jaxpr.outvars):
        if outer.aval.shape != inner.aval.shape:
            break
        count += 1
    return count
