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


# ----- dataflow: which equations do work that reaches the outputs ---------------------------

_SHAPE_ONLY = frozenset({"broadcast_in_dim", "reshape", "convert_element_type", "squeeze",
                         "expand_dims", "transpose", "copy", "copy_p"})


def _is_literal(v) -> bool:
    from jax.extend.core import Literal
    return isinstance(v, Literal)


def _known_zero(jaxpr) -> set:
    """Variables that are zero whatever the inputs: a literal 0 reshaped or broadcast, a
    product with such a value, a sum of such values."""
    import numpy as np

    zero: set = set()

    def is_zero(v) -> bool:
        if _is_literal(v):
            try:
                return bool(np.all(np.asarray(v.val) == 0))
            except Exception:  # a literal that is not an array
                return False
        return v in zero

    for eqn in jaxpr.eqns:
        name, ins = eqn.primitive.name, eqn.invars
        if ((name == "mul" and any(map(is_zero, ins)))
                or (name in _SHAPE_ONLY and ins and is_zero(ins[0]))
                or (name in ("add", "add_any", "sub") and all(map(is_zero, ins)))):
            zero.update(eqn.outvars)
    return zero


def _forwarded(eqn) -> dict[int, int]:
    """output index -> input index, for the outputs of a jit or checkpoint that return one of
    its inputs unchanged (nnx.remat hands the module's state back this way)."""
    inner = eqn.params.get("jaxpr") if is_a(eqn, "jit") or is_a(eqn, "checkpoint") else None
    inner = getattr(inner, "jaxpr", inner)
    if inner is None or len(inner.invars) != len(eqn.invars):
        return {}
    position = {v: i for i, v in enumerate(inner.invars)}
    return {j: position[v] for j, v in enumerate(inner.outvars) if not _is_literal(v) and v in position}


def _live(jaxpr, used: list, out: set) -> list:
    zero = _known_zero(jaxpr)
    needed = {v for v, u in zip(jaxpr.outvars, used) if u and not _is_literal(v) and v not in zero}
    for eqn in reversed(jaxpr.eqns):
        outs_used = [v in needed for v in eqn.outvars]
        forwarded = _forwarded(eqn)
        for j, i in forwarded.items():
            if outs_used[j]:
                outs_used[j] = False  # an input passed through: the input is needed, not the work
                if not _is_literal(eqn.invars[i]) and eqn.invars[i] not in zero:
                    needed.add(eqn.invars[i])
        if not any(outs_used):
            continue
        out.add(id(eqn))
        inner = eqn.params.get("jaxpr") if is_a(eqn, "jit") else None
        if inner is not None:
            inner_in = _live(getattr(inner, "jaxpr", inner), outs_used, out)
            needed.update(v for v, u in zip(eqn.invars, inner_in) if u and not _is_literal(v) and v not in zero)
        else:
            for sub in sub_jaxprs(eqn):
                out.update(id(e) for e in walk(sub))
            needed.update(v for v in eqn.invars if not _is_literal(v) and v not in zero)
    return [v in needed for v in jaxpr.invars]


def live_equations(jaxpr, used_outputs=None) -> set[int]:
    """ids of the equations (at every depth) whose results reach the used outputs (all by
    default): dead code, and values only ever multiplied by zero, are left out, so that
    `out + 0 * f(x)` does not count f as doing work. Jits are followed inside; any other
    equation holding sub-jaxprs (a checkpoint, a scan) is live or dead as a whole."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    used = [True] * len(jaxpr.outvars) if used_outputs is None else list(used_outputs)
    out: set[int] = set()
    _live(jaxpr, used, out)
    return out
