"""Reading a traced program: which primitives it holds, including inside scans, checkpoints,
shard_maps and jits (every sub-jaxpr is walked)."""

from collections.abc import Callable, Iterator

import jax
from jax.extend.core import Literal, jaxprs_in_params

# Several user-facing names bind to one primitive; a check asks for the idea, not the spelling.
ALIASES: dict[str, frozenset[str]] = {
    # jax.checkpoint, jax.remat, nnx.remat and nn.checkpoint all bind `remat2` in JAX 0.12
    "checkpoint": frozenset({"remat2", "checkpoint", "remat"}),
    "scan": frozenset({"scan"}),
    "shard_map": frozenset({"shard_map"}),
    "dot": frozenset({"dot_general"}),
    "jit": frozenset({"pjit", "jit", "closed_call", "core_call"}),
    "custom_vjp": frozenset({"custom_vjp_call", "custom_vjp_call_jaxpr"}),
    "custom_jvp": frozenset({"custom_jvp_call"}),
}

# Equations that call one program once on their own operands and return its results: a value can
# be followed through them exactly. The parameter that holds the program called, by kind (a
# custom_vjp's or custom_jvp's is its primal function; the rules for derivatives are not followed).
CALLS = {"jit": "jaxpr", "checkpoint": "jaxpr", "custom_vjp": "call_jaxpr", "custom_jvp": "call_jaxpr"}
EVERY_CALL = tuple(CALLS)
# Plain calls JAX makes of a program (closed_call, core_call): followed only where asked.
CALLS.update({"closed_call": "call_jaxpr", "core_call": "call_jaxpr"})


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


# Following values through a program. Calls to jit are inlined, so what a learner wraps in
# jax.jit (or what jnp wraps, e.g. relu) is seen at the level of its caller.

def called(eqn, through=("jit",)):
    """The program an equation of one of the kinds `through` (see CALLS) calls on its operands,
    or None: for following values through it."""
    kind = next((k for k in through if is_a(eqn, k)), None)
    sub = eqn.params.get(CALLS[kind]) if kind is not None else None
    if sub is None or len(getattr(sub, "jaxpr", sub).invars) != len(eqn.invars):
        return None
    return sub


def evaluate(jaxpr, consts, args, apply: Callable, through=("jit",)) -> list:
    """Run a jaxpr equation by equation, calls to jit inlined (and to the other kinds of CALLS
    named in `through`); every other equation's outputs are apply(eqn, inputs). With apply=bind it
    computes the program on arrays (under a trace or not); with a symbolic apply (see dataflow) it
    says which equation made each value."""
    env = {}

    def read(atom):
        return atom.val if isinstance(atom, Literal) else env[atom]

    env.update(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        sub = called(eqn, through)
        if sub is not None:
            outs = evaluate(getattr(sub, "jaxpr", sub), getattr(sub, "consts", ()), ins, apply, through)
        else:
            outs = apply(eqn, ins)
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]


def bind(eqn, inputs) -> list:
    """The equation's primitive applied to these inputs: what running the equation does. Under a
    trace the new equation keeps the source line of the old one (written_at reads it)."""
    from jax._src import source_info_util

    # as jax's own eval_jaxpr does (the context mesh of a jit; the learner's source line)
    with source_info_util.user_context(eqn.source_info.traceback), eqn.ctx.manager:
        out = eqn.primitive.bind(*inputs, **eqn.primitive.get_bind_params(eqn.params))
    return list(out) if eqn.primitive.multiple_results else [out]


class Value:
    """A symbolic value: made by output `index` of `eqn` (None for an input) from `parents`.
    `site` is shared by the outputs of one execution of the equation: an equation of a jit body
    that runs twice (a jitted function called twice shares its body) has two sites."""

    __slots__ = ("eqn", "index", "parents", "const", "site")

    def __init__(self, eqn, index, parents=(), const=None, site=None):
        self.eqn, self.index, self.parents, self.const, self.site = eqn, index, tuple(parents), const, site


def dataflow(jaxpr, consts=(), through=("jit",)) -> tuple[list, list]:
    """(inputs, outputs) of jaxpr as Values: follow an output's `eqn` and `parents` back to see
    what made it. A literal operand shows up as a Value with `const` set. Calls of the kinds
    `through` (jit by default; EVERY_CALL adds checkpoints and custom_vjp/custom_jvp functions)
    are followed inside; any other equation holding programs (scan, cond, while) is one step."""
    inputs = [Value(None, i) for i in range(len(jaxpr.invars))]

    def apply(eqn, ins):
        parents = [v if isinstance(v, Value) else Value(None, -1, const=v) for v in ins]
        site = object()
        return [Value(eqn, i, parents, site=site) for i in range(len(eqn.outvars))]

    outputs = evaluate(jaxpr, [Value(None, -1, const=c) for c in consts], inputs, apply, through)
    outputs = [v if isinstance(v, Value) else Value(None, -1, const=v) for v in outputs]
    return inputs, outputs


def ancestors(value: "Value") -> list:
    """Every Value the given one was computed from (itself included): what is live for it."""
    seen, stack, order = set(), [value], []
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        order.append(v)
        stack.extend(v.parents)
    return order


def live(jaxpr):
    """jaxpr without the equations whose results never reach an output, sub-jaxprs (jit,
    shard_map, scan bodies) included: a decoy whose result is discarded is gone."""
    from jax._src.interpreters import partial_eval as pe  # JAX's own dead-code elimination

    pruned, _ = pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars))
    return pruned


def output_source(jaxpr, index: int = 0, through: tuple = ("jit",), layout: bool = False):
    """The equation whose result is output `index` of jaxpr, looking through jit wrappers (a jit's
    output is its body's), or None for an input or a literal: says whether a primitive's result *is*
    what a function returns, rather than something added to it (e.g. `real + 0 * decoy`).
    `through` names the kinds of wrapper looked into ("jit", "checkpoint", "custom" for
    custom_jvp/custom_vjp calls); `layout=True` also looks through equations that only reshape,
    transpose or convert a value (SHAPE_ONLY), so `psum(partial_t, ...).T` is the psum's result."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    var = jaxpr.outvars[index]
    while True:
        eqn = next((e for e in jaxpr.eqns if any(v is var for v in e.outvars)), None)
        if eqn is None:
            return None
        if layout and eqn.primitive.name in SHAPE_ONLY and eqn.invars and not _is_literal(eqn.invars[0]):
            var = eqn.invars[0]
            continue
        inner = _wrapped(eqn, through)
        if inner is None:
            return eqn
        position = next(i for i, v in enumerate(eqn.outvars) if v is var)
        jaxpr, var = inner, inner.outvars[position]


_CUSTOM = frozenset({"custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr"})


def _wrapped(eqn, through):
    """The body of a wrapper equation of one of the kinds in `through` (its outputs are its
    body's, one for one), or None."""
    if not (any(is_a(eqn, kind) for kind in through if kind != "custom")
            or ("custom" in through and eqn.primitive.name in _CUSTOM)):
        return None
    inner = eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
    inner = getattr(inner, "jaxpr", inner)
    if inner is None or len(inner.outvars) != len(eqn.outvars):
        return None
    return inner


def flatten(fn: Callable, *args, through=("jit",)):
    """fn's program with its jit calls (or the kinds in `through`, see CALLS) inlined and its dead code
    removed: (jaxpr, consts).

    Dead-code removal is JAX's own (`dce_jaxpr`): it drops exactly the equations, scan carries and
    scan outputs that no returned value depends on, and keeps everything that does, even a
    `* 0`. So what is left is what the result is computed from, but not yet how much each part
    contributes; a check that needs that evaluates the program (see graders/exercises/ex1_token_accumulation/probes.py for an example).
    """
    from jax._src.interpreters import partial_eval as pe

    traced = jax.make_jaxpr(fn)(*args)
    inlined = jax.make_jaxpr(lambda *a: evaluate(traced.jaxpr, traced.consts, a, bind, through))(*args)
    pruned, _ = pe.dce_jaxpr(inlined.jaxpr, [True] * len(inlined.jaxpr.outvars), instantiate=True)
    return pruned, inlined.consts


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


_OWN_POLICY = object()


def checkpoint_residuals(eqn, policy=_OWN_POLICY) -> list[tuple[str, int]]:
    """What a checkpoint (remat2) equation's `policy` (or the policy given) keeps for the
    backward pass, measured by differentiating its body under that policy: one
    ('float32[5] output of dot_general', bytes) per value kept that is computed from the
    checkpoint's inputs. The inputs themselves are left out (they are kept anyway), and so are
    constants, which depend on no input (e.g. the zeros ReLU's derivative selects from): keeping
    one saves nothing worth recomputing, so a policy that keeps every value but a constant keeps
    as much as everything_saveable. [] means: keeps nothing, recomputes everything."""
    from jax.extend.core import ClosedJaxpr, jaxpr_as_fun

    body = eqn.params["jaxpr"]
    fun = jaxpr_as_fun(ClosedJaxpr(body, ()))
    args = [jax.numpy.zeros(v.aval.shape, v.aval.dtype) for v in body.invars]
    policy = eqn.params["policy"] if policy is _OWN_POLICY else policy
    checkpointed = jax.checkpoint(lambda *a: fun(*a), policy=policy)
    # As jax.ad_checkpoint.print_saved_residuals reads them: the residuals are the last outputs
    # of the traced jax.vjp (the leaves of the function it returns).
    traced, shapes = jax.make_jaxpr(lambda *a: jax.vjp(checkpointed, *a), return_shape=True)(*args)
    program = traced.jaxpr
    count = len(jax.tree.leaves(shapes[1]))
    residuals = program.outvars[len(program.outvars) - count:]
    computed = depends_on(program.replace(outvars=residuals), lambda _: False, [True] * len(program.invars))
    made_by = {v: e for e in program.eqns for v in e.outvars}
    inputs = set(program.invars)
    found, seen = [], set()
    for var, from_inputs in zip(residuals, computed):
        if _is_literal(var) or var in inputs or not from_inputs or var in seen:
            continue
        seen.add(var)
        made = made_by.get(var)
        while made is not None and made.primitive.name == "reduce_precision":  # as JAX looks through it
            made = made_by.get(made.invars[0], made)
            if made.primitive.name == "reduce_precision":
                break
        name = made.primitive.name if made is not None else "an equation"
        what = (f"named {made.params['name']!r}" if name == "name" else
                f"output of jitted function {made.params['name']!r}" if name in ("jit", "pjit") else
                f"output of {name}")
        aval = var.aval
        found.append((f"{aval.str_short()} {_in_words(what)}", int(aval.size) * aval.dtype.itemsize))
    return found


def checkpoint_saves(eqn, policy=_OWN_POLICY) -> list[str]:
    """checkpoint_residuals(eqn, policy), described: ['float32[5] output of dot_general', ...]."""
    return [what for what, _ in checkpoint_residuals(eqn, policy)]


def _in_words(what: str) -> str:
    """'output of dot_general' as the learner wrote it: 'output of a matrix product (...)'."""
    head, _, name = what.rpartition("output of ")
    return f"{head}output of {said(name)}" if name in SAID else what


def custom_vjp_name(eqn) -> str | None:
    """The name of the function a custom_vjp_call equation calls (what the jaxpr shows as
    name=...), e.g. to find a probe a grader put into the learner's program; None otherwise."""
    if eqn.primitive.name != "custom_vjp_call":
        return None
    info = getattr(eqn.params.get("call_jaxpr"), "jaxpr", None)
    info = getattr(info, "debug_info", None)
    return getattr(info, "func_name", None)


# ----- dataflow: which equations do work that reaches the outputs ---------------------------

# Equations that only move, convert or reshape a value.
SHAPE_ONLY = frozenset({"broadcast_in_dim", "reshape", "convert_element_type", "squeeze",
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
                or (name in SHAPE_ONLY and ins and is_zero(ins[0]))
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


# ----- how much of an input a program reads ---------------------------------------------------

# Equations that take a part of their first operand: a slice, an index (x[i], dynamic_slice),
# a gather (jnp.take, x[idx]). Whatever spells it, reading through one reads only that part.
SELECTS = frozenset({"slice", "dynamic_slice", "gather"})


def scan_operands(eqn) -> tuple[list[int], list[int], list[int]]:
    """Positions of a scan's operands that are its constants, its initial carry and its xs."""
    consts, carry, xs = eqn.params["ft_in"].update(list(range(len(eqn.invars)))).unpack()
    return list(consts), list(carry), list(xs)


def _size(v) -> int:
    import math
    return int(math.prod(getattr(v.aval, "shape", ())))


def numbers_read(jaxpr, index: int) -> int:
    """How many numbers of input `index` one run of jaxpr reads: the sizes of the parts that
    slices, indexings and gathers take of it, followed through reshapes and into every nested
    program (jit, checkpoint, custom_vjp/jvp; a cond's largest branch; all the steps of a scan);
    its whole size as soon as anything else computes with all of it, hands it on, or a while loop
    reads it (how often is not known)."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    var = jaxpr.invars[index]
    read = _reads(jaxpr, {var})
    return _size(var) if read is None else min(read, _size(var))


def _reads(jaxpr, held: set) -> int | None:
    """Numbers of the value `held` (variables of jaxpr holding the same numbers) that jaxpr reads,
    or None for all of them."""
    held = set(held)
    total = 0
    for eqn in jaxpr.eqns:
        at = [i for i, v in enumerate(eqn.invars) if not _is_literal(v) and v in held]
        if not at:
            continue
        name = eqn.primitive.name
        if name in SHAPE_ONLY and at == [0] and all(_size(o) == _size(eqn.invars[0]) for o in eqn.outvars):
            held.update(eqn.outvars)  # the same numbers, another shape or dtype
            continue
        if name in SELECTS and at == [0]:
            total += _size(eqn.outvars[0])
            continue
        inner = _nested_reads(eqn, at)
        if inner is None:
            return None
        total += inner
    if any(not _is_literal(v) and v in held for v in jaxpr.outvars):
        return None  # handed on whole
    return total


def _nested_reads(eqn, at: list[int]) -> int | None:
    def program(sub):
        return getattr(sub, "jaxpr", sub)

    def each(inner, positions):
        total = 0
        for i in positions:
            read = _reads(inner, {inner.invars[i]})
            if read is None:
                return None
            total += read
        return total

    name = eqn.primitive.name
    if name == "cond":
        if 0 in at:  # the branch index itself
            return None
        reads = [each(program(b), [i - 1 for i in at]) for b in eqn.params["branches"]]
        return None if None in reads else max(reads, default=0)
    if name == "scan":
        consts, carry, xs = scan_operands(eqn)
        if any(i in carry for i in at):
            return None
        read = each(program(eqn.params["jaxpr"]), at)
        return None if read is None else read * eqn.params["length"]
    sub = called(eqn, EVERY_CALL + ("closed_call", "core_call"))
    if sub is not None:
        return each(program(sub), at)
    return None  # a while loop, a shard_map, an operation: all of it


# ----- naming what a program does, in the learner's words -----------------------------------

# A traced program's names are JAX's (`div`, `reduce_sum`, `dot_general`), not what the learner
# wrote: a message names the operation as it is written in Python.
SAID = {
    "add": "an addition (+)", "add_any": "an addition (+)", "sub": "a subtraction (-)",
    "mul": "a multiplication (*)", "div": "a division (/)", "neg": "a negation (-x)",
    "integer_pow": "a power (**)", "pow": "a power (**)", "square": "a square (** 2)", "sqrt": "jnp.sqrt",
    "rsqrt": "1 / jnp.sqrt", "exp": "jnp.exp", "log": "jnp.log", "tanh": "jnp.tanh", "logistic": "jax.nn.sigmoid",
    "max": "jnp.maximum", "min": "jnp.minimum", "abs": "jnp.abs", "sign": "jnp.sign",
    "dot_general": "a matrix product (@, jnp.dot, jnp.einsum)", "reduce_sum": "a sum (jnp.sum)",
    "reduce_max": "a maximum (jnp.max)", "reduce_min": "a minimum (jnp.min)", "argmax": "jnp.argmax",
    "cumsum": "jnp.cumsum", "select_n": "a selection (jnp.where, lax.select)", "eq": "a comparison (==)",
    "ne": "a comparison (!=)", "lt": "a comparison (<)", "le": "a comparison (<=)", "gt": "a comparison (>)",
    "ge": "a comparison (>=)", "and": "a logical and (&)", "or": "a logical or (|)", "not": "a logical not (~)",
    "is_finite": "jnp.isfinite", "stop_gradient": "lax.stop_gradient", "convert_element_type": "a cast (astype)",
    "broadcast_in_dim": "a broadcast", "reshape": "a reshape", "transpose": "a transpose", "squeeze": "a squeeze",
    "expand_dims": "an expand_dims", "concatenate": "jnp.concatenate", "pad": "jnp.pad", "iota": "jnp.arange",
    "slice": "a slice (x[a:b])", "dynamic_slice": "a slice (x[i], lax.dynamic_slice)",
    "gather": "an indexing (x[idx], jnp.take)", "scatter": "an update (x.at[...].set)",
    "scatter-add": "an update (x.at[...].add)", "scatter_add": "an update (x.at[...].add)",
    "dynamic_update_slice": "an update (lax.dynamic_update_slice)", "sort": "jnp.sort",
    "scan": "lax.scan", "while": "lax.while_loop", "cond": "lax.cond", "pjit": "jax.jit", "jit": "jax.jit",
    "remat2": "jax.checkpoint", "checkpoint": "jax.checkpoint", "custom_vjp_call": "a jax.custom_vjp function",
    "custom_jvp_call": "a jax.custom_jvp function", "shard_map": "jax.shard_map", "psum": "lax.psum",
    "pmean": "lax.pmean", "pmax": "lax.pmax", "all_gather": "lax.all_gather",
    "reduce_scatter": "lax.psum_scatter", "psum_scatter": "lax.psum_scatter", "all_to_all": "lax.all_to_all",
    "ppermute": "lax.ppermute", "axis_index": "lax.axis_index", "random_bits": "jax.random",
    "reshard": "jax.sharding.reshard", "device_put": "jax.device_put",
    "sharding_constraint": "lax.with_sharding_constraint", "mesh_cast": "jax.sharding.mesh_cast",
    "optimization_barrier": "lax.optimization_barrier", "pure_callback": "jax.pure_callback",
    "debug_callback": "jax.debug.print (a callback)",
}


def said(name: str) -> str:
    """How a learner writes the primitive `name` (a traced program's own name, never shown)."""
    return SAID.get(name, "an operation")


def written_at(eqn, filename: str = "") -> str:
    """'line N' of `filename` where the equation was written (the innermost such frame of its
    source), or '' when it was not written there. An equation of a program rebuilt from data
    (graders/kit/program.py), or traced from one, carries the learner's line itself."""
    from jax._src import source_info_util

    from graders.kit.program import line_of

    line = line_of(eqn)
    if line:
        return f"line {line}"
    if not filename:
        return ""

    target = str(filename)
    try:
        frames = list(source_info_util.user_frames(eqn.source_info.traceback))
    except Exception:  # no traceback kept
        return ""
    for frame in frames:  # innermost first
        if frame.file_name == target:
            return f"line {frame.start_line}"
    return ""
