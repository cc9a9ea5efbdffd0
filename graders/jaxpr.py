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
    """jaxpr with dead code removed: equations none of whose results reach an output are dropped,
    inside checkpoints and jits too, so a discarded computation leaves nothing to find."""
    from jax._src.interpreters import partial_eval as pe  # JAX's own dead-code elimination

    pruned, _ = pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars))
    return pruned


_OWN_POLICY = object()


def checkpoint_saves(eqn, policy=_OWN_POLICY) -> list[str]:
    """What a checkpoint (remat2) equation's `policy` (or the policy given) saves for the
    backward pass, measured by differentiating its body under that policy: one
    'f32[5] output of dot_general' per value kept that is not one of the checkpoint's own
    inputs (so [] means: saves nothing, recomputes everything)."""
    from jax._src.ad_checkpoint import saved_residuals  # what print_saved_residuals prints
    from jax.extend.core import ClosedJaxpr, jaxpr_as_fun

    body = eqn.params["jaxpr"]
    fun = jaxpr_as_fun(ClosedJaxpr(body, ()))
    args = [jax.numpy.zeros(v.aval.shape, v.aval.dtype) for v in body.invars]
    policy = eqn.params["policy"] if policy is _OWN_POLICY else policy
    found = saved_residuals(jax.checkpoint(lambda *a: fun(*a), policy=policy), *args)
    return [f"{aval.str_short()} {what.split(' from ')[0]}" for aval, what in found
            if not what.startswith("from the argument")]


def custom_vjp_name(eqn) -> str | None:
    """The name of the function a custom_vjp_call equation calls (what the jaxpr shows as
    name=...), e.g. to find a probe a grader put into the learner's program; None otherwise."""
    if eqn.primitive.name != "custom_vjp_call":
        return None
    info = getattr(eqn.params.get("call_jaxpr"), "jaxpr", None)
    info = getattr(info, "debug_info", None)
    return getattr(info, "func_name", None)
