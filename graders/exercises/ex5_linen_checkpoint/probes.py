"""Probes for Exercise 5: the learner's nn_checkpoint_forward, called, and traced with taps put
into their Linen model; what comes back is arrays, shapes and the traced program as data
(graders/kit/program.py), with labels for its taps (which is which Dense layer, which remat2 is
Linen's lift) and what a policy of the learner's own saves (Python code, which the judge does not run).

Inputs (x) come from the checks as arguments; every expected value, and every verdict on what
comes back, is the checks'. The shared names below
(FIRST, SECOND, the error kinds) are imported by the checks too.
"""

import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import flax.core.lift
import flax.linen as nn
import flax.linen.transforms
import jax
import jax.numpy as jnp
import numpy as np
from flax.errors import TransformTargetError

from graders.kit import jaxpr, wire
from graders.kit import program as program_data
from graders.kit.verdicts import describe, learner_frame
from graders.kit.numeric import as_array
from graders.kit.probing import probe

FIRST, SECOND = "the first Dense layer", "the second Dense layer"
# What a probe answers instead of a value when the learner's code raised one of these (in the
# learner's own file): the checks turn it into their verdict, with a hint.
TRANSFORM_TARGET = "transform_target"  # flax's TransformTargetError: nn.checkpoint of an instance
TYPE_OR_VALUE = "type_or_value"  # a TypeError or ValueError (e.g. a float seed or features)
PREFIX = "ex5_grader_probe_"


def _solutions_dir(sol) -> Path:
    """The learner's folder (graders.kit.verdicts.load_module imports the module by its resolved path)."""
    return Path(sol.__file__).resolve().parent


def _raised(sol, exc: BaseException) -> dict | None:
    """{"raised": kind, "described": ...} for an error of the learner's code that a check words
    itself, else None (the error goes on to graders.kit.verdicts.classify, as any other)."""
    where = _solutions_dir(sol)
    if learner_frame(exc, where) is None:
        return None
    if isinstance(exc, TransformTargetError):
        kind = TRANSFORM_TARGET
    elif isinstance(exc, (TypeError, ValueError)):
        kind = TYPE_OR_VALUE
    else:
        return None
    return {"raised": kind, "described": describe(exc, where)}


def _guarded(fn):
    """A probe whose learner errors of the kinds above come back as data."""
    def run(sol, *args, **kwargs):
        try:
            return fn(sol, *args, **kwargs)
        except (TransformTargetError, TypeError, ValueError) as exc:
            answer = _raised(sol, exc)
            if answer is None:
                raise
            return answer
    run.__name__ = run.__qualname__ = fn.__name__
    run.__doc__ = fn.__doc__
    return probe(run)


def _remembered(fn):
    """fn's answers kept for the learner's module it was given: the technique checks each ask
    for the same traced program (and mostly the same tapped runs), which is traced, measured and
    differentiated once. Only answers are kept: an error is raised again each time."""
    answers = {}

    def run(sol, *args, **kwargs):
        key = (id(sol), wire.encode([list(args), kwargs]))
        if key not in answers:
            answers[key] = fn(sol, *args, **kwargs)
        return answers[key]
    run.__name__ = run.__qualname__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


# Every probe runs the learner's code in one of these threads, never in the main thread: the
# output calls overlap there (see `start`), and no call can be told from another by its thread.
LEARNER_THREADS = "ex5-learner"
_THREADS = ThreadPoolExecutor(max_workers=2, thread_name_prefix=LEARNER_THREADS)


def _in_learner_thread(fn):
    """fn's whole body (tracing included: JAX's and Flax's contexts are per thread) run in one
    of the learner threads; its value or its exception comes back as a direct call gives it."""
    def run(*args, **kwargs):
        return _THREADS.submit(fn, *args, **kwargs).result()
    run.__name__ = run.__qualname__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


def _call(sol, seed, x, features):
    return sol.nn_checkpoint_forward(seed, x, features)


def _afresh(run, seen):
    """run(), whose interception of the learner's modules is read by seen(): if it saw nothing,
    the learner's code ran a program JAX had traced before at these shapes (a jax.jit of their
    own, kept in JAX's caches) without running its Python code, so no module call could be
    intercepted. Then JAX's caches are cleared and run() is tried once more."""
    out = run()
    if not seen(out):
        jax.clear_caches()
        out = run()
    return out


# Calls of nn_checkpoint_forward started ahead of the checks that ask for them (see `start`):
# (id of the module, the call's arguments encoded) -> its future.
_STARTED: dict = {}


def _call_key(sol, seed, x, features):
    return (id(sol), wire.encode([seed, np.asarray(x, np.float32), features]))


@probe
def start(sol, calls):
    """Start nn_checkpoint_forward(seed, x, features) for each [seed, x, features] of `calls`,
    two at a time in threads, and return at once: the learner's Flax code runs op by op, and
    while one call waits for XLA to compile an op (which releases the GIL) the next one runs.
    `forward` then waits for the call it is asked for, and gets its value or its exception as
    a direct call would have."""
    for seed, x, features in calls:
        key = _call_key(sol, seed, x, features)
        if key not in _STARTED:
            _STARTED[key] = _THREADS.submit(_call, sol, seed, jnp.asarray(x, jnp.float32), features)
    return len(calls)


@_guarded
def forward(sol, seed, x, features, what: str):
    """{"out": the learner's output as a float64 array} for nn_checkpoint_forward(seed, x,
    features), x given as a float32 NumPy array and passed on as a JAX array (the call `start`
    began, if it did)."""
    started = _STARTED.pop(_call_key(sol, seed, x, features), None)
    if started is None:
        started = _THREADS.submit(_call, sol, seed, jnp.asarray(x, jnp.float32), features)
    return {"out": as_array(started.result(), what)}


@_guarded
@_in_learner_thread
def x_after_call(sol, seed, x, features):
    """{"deleted": whether the caller's x was deleted by the call, "now": what it holds after it}."""
    x = jnp.asarray(x, jnp.float32)
    _call(sol, seed, x, features)
    if x.is_deleted():
        return {"deleted": True, "now": None}
    return {"deleted": False, "now": np.asarray(x, np.float64)}


def _plain_tree(tree):
    """A parameter tree's shapes as nested dicts of shape tuples (a FrozenDict, the tree of
    variables a learner froze with flax.core.freeze, is sent as the dict it holds)."""
    if isinstance(tree, Mapping):
        return {k: _plain_tree(v) for k, v in tree.items()}
    return tree


@_guarded
@_in_learner_thread
def parameter_tree(sol, seed, x, features):
    """{"tree": the shapes of the parameters the learner's top-level module was last applied
    to (read with flax.linen.intercept_methods), or None if no module was applied to any}."""
    def run():
        seen = []

        def record(next_fun, args, kwargs, context):
            module = context.module
            if module.scope is not None and module.path == () and not module.is_initializing():
                params = module.variables.get("params")
                if params:
                    seen.append(jax.tree.map(lambda a: tuple(int(n) for n in np.shape(a)), dict(params)))
            return next_fun(*args, **kwargs)

        with nn.intercept_methods(record):
            _call(sol, seed, jnp.asarray(x, jnp.float32), features)
        return seen

    seen = _afresh(run, bool)
    return {"tree": _plain_tree(seen[-1]) if seen else None}


# ----- what the checkpoint does -------------------------------------------------------------
# Checkpointing changes no number, so the technique checks put taps into the learner's model
# while it is applied (flax.linen.intercept_methods; init is left alone). In the program sent to
# the judge a tap is an identity jitted under its own name (`marked_tap`): the judge's rebuilt
# program says which module calls run inside which remat2, and whether they are still there once
# dead code is removed. The judge then puts its own taps (`tap`: an identity with its own custom
# VJP, which shifts its call's output and scales its cotangent) where those are, and runs it.


def tap(name: str, shift=None, scale: float = 1.0):
    """h -> h (+ shift), whose backward multiplies the cotangent by `scale`."""
    def identity(h):
        return h if shift is None else h + shift
    identity.__name__ = identity.__qualname__ = name  # the name the jaxpr shows
    fn = jax.custom_vjp(identity)
    fn.defvjp(lambda h: (identity(h), None), lambda _, ct: (ct * scale,))
    return fn


class Taps:
    """Interceptor for the applied model: the output of each module call (a Dense layer, the
    MLP, any module of the learner's) goes through tap `call_<k>`, k counting calls as they
    return (with marks=True, a `marked_tap`). perturb[k] = (shift, scale) puts tap k to work. It also reads how many of Linen's
    lifted checkpoints each call runs in: Flax writes each lifted transform into the scope's
    debug path ('remat()' for nn.checkpoint). A Dense layer whose input has d features is the
    first one (d is the width of x; the checks pick D != F)."""

    def __init__(self, d: int, perturb=None, marks: bool = False):
        self.d, self.perturb, self.marks = d, perturb or {}, marks
        self.calls = []  # k -> (role: FIRST, SECOND or None for other modules, Linen checkpoints)

    def __call__(self, next_fun, args, kwargs, context):
        module = context.module
        out = next_fun(*args, **kwargs)
        if module.is_initializing() or context.method_name != "__call__" or not isinstance(out, jax.Array):
            return out
        role = None
        if isinstance(module, nn.Dense) and args:
            role = FIRST if np.shape(args[0])[-1:] == (self.d,) else SECOND
        k = len(self.calls)
        # The lift writes itself into the debug path only; a module merely named "remat(...)"
        # is in the path too.
        linen = sum(step.count("remat(") for step in module.scope.debug_path) - sum(
            step.count("remat(") for step in module.scope.path)
        self.calls.append((role, linen))
        # The shift stays a NumPy array: made a JAX array here, under the checkpoint's trace,
        # it would be a tracer that the tap's custom VJP closes over and leaks.
        if self.marks:
            return marked_tap(f"{PREFIX}call_{k}")(out)
        return tap(f"{PREFIX}call_{k}", *self.perturb.get(k, ()))(out)


# The files of Flax's lifted transforms: the function nn.checkpoint hands to jax.checkpoint is
# defined there (jax.checkpoint(model.apply) traces Module.apply, defined in flax/linen/module.py).
LIFT_FILES = {os.path.realpath(m.__file__) for m in (flax.linen.transforms, flax.core.lift)}


def traced_by_linen_lift(remat) -> bool:
    """Whether JAX traced this remat2's body from a function of Flax's lifted transforms, as
    its debug info ('core_fn at .../flax/linen/transforms.py:341') records."""
    info = getattr(remat.params["jaxpr"], "debug_info", None)
    where = getattr(info, "func_src_info", None) or ""
    return " at " in where and os.path.realpath(where.rsplit(" at ", 1)[1].rsplit(":", 1)[0]) in LIFT_FILES


def show_policy(remat) -> str:
    policy = remat.params["policy"]
    if policy is None:
        return "policy=None"
    # save_only_these_names(...) and its kin return a closure named "policy": its qualname says whose.
    return getattr(policy, "__qualname__", None) or repr(policy)


def tap_name(eqn) -> str:
    """The name of the jit call an equation makes ('' for any other equation): a tap of
    `Taps(..., marks=True)` is an identity jitted under its own name, which a program carries."""
    if eqn.primitive.name not in ("jit", "pjit"):
        return ""
    return str(eqn.params.get("name", ""))


def is_sent_relu(eqn) -> bool:
    """Whether an equation is nn.relu as a program is sent (graders/kit/program.py's forward=True:
    its custom_jvp as a jit of its primal, max(h, 0)). Measured as jax.nn.relu, with its own
    derivative rule, what a policy saves is what it saves in the learner's own model."""
    if tap_name(eqn) != "custom_jvp_call" or len(eqn.invars) != 1:
        return False
    inner = eqn.params["jaxpr"].jaxpr
    if len(inner.eqns) != 1 or tap_name(inner.eqns[0]) != "relu":
        return False
    body = inner.eqns[0].params["jaxpr"].jaxpr
    if len(body.eqns) != 1 or body.eqns[0].primitive.name != "max":
        return False
    zero = body.eqns[0].invars[1]
    return body.eqns[0].invars[0] is body.invars[0] and hasattr(zero, "val") and float(np.asarray(zero.val)) == 0.0


def untapped(remat):
    """A remat2 equation's parameters as if the taps were not there (each tap's jit inlined), so
    that what its policy saves is measured, and named, as in the learner's own model:
    graders.kit.jaxpr.checkpoint_residuals reads it (an object with `params`)."""
    from types import SimpleNamespace

    def apply(eqn, ins):
        if tap_name(eqn).startswith(PREFIX):
            sub = eqn.params["jaxpr"]
            return jaxpr.evaluate(sub.jaxpr, sub.consts, ins, apply, through=())
        if is_sent_relu(eqn):
            return [jax.nn.relu(ins[0])]
        return jaxpr.bind(eqn, ins)

    body = remat.params["jaxpr"]
    if not any(tap_name(e).startswith(PREFIX) or is_sent_relu(e) for e in jaxpr.walk(body)):
        return remat
    avals = [v.aval for v in body.invars]
    redone = jax.make_jaxpr(lambda *a: jaxpr.evaluate(body, [], a, apply, through=()))(
        *[jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals])
    if redone.consts:  # constants made while retracing (none in a Linen body): measured as it is
        return remat
    return SimpleNamespace(params=dict(remat.params, jaxpr=redone.jaxpr))


def marked_tap(name: str):
    """h -> h, jitted under `name`: a tap that marks a call in a program the judge rebuilds (a
    custom_vjp tap is not sent: its backward rule is Python code)."""
    def identity(h):
        return h
    identity.__name__ = identity.__qualname__ = name
    return jax.jit(identity)


def sendable(closed):
    """The traced program as the judge runs it: a function of x alone. What does not depend on x
    (the key, model.init and its random draws, which are of no type a program is sent with) is
    computed here, by JAX's own partial evaluation, and travels as the program's constants (the
    parameters); what depends on x is the program, its checkpoints, policies and taps as traced."""
    from jax._src.interpreters import partial_eval as pe
    from jax.extend.core import ClosedJaxpr

    known, unknown, _, residuals = pe.partial_eval_jaxpr_nounits(closed, [True], instantiate=True)
    values = jax.core.eval_jaxpr(known.jaxpr, known.consts)
    n = len(residuals)
    body = unknown.jaxpr
    return ClosedJaxpr(body.replace(constvars=[*body.constvars, *body.invars[:n]], invars=body.invars[n:]),
                       [*unknown.consts, *values])


def policy_programs(eqn, filename: str) -> dict:
    """A checkpoint whose policy is the learner's own, as JAX differentiates it: {"forward": the
    program of jax.vjp's forward pass over its body (taps inlined) under that policy, whose
    outputs are the body's and then the residuals the policy keeps, "backward": the program
    from those residuals and the cotangents to the gradients, "residuals": how many}. The
    judge runs both on its own values, holds them to its own gradient of the body, and reads
    what the residuals are (what graders.kit.jaxpr.checkpoint_residuals measures here)."""
    from jax.extend.core import ClosedJaxpr, jaxpr_as_fun

    body = untapped(eqn).params["jaxpr"]
    fun = jaxpr_as_fun(ClosedJaxpr(body, ()))
    checkpointed = jax.checkpoint(lambda *a: fun(*a), policy=eqn.params["policy"],
                                  prevent_cse=eqn.params.get("prevent_cse", True))
    args = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in body.invars]
    forward, shapes = jax.make_jaxpr(lambda *a: jax.vjp(checkpointed, *a), return_shape=True)(*args)
    tree = jax.tree.structure(shapes[1])
    residuals = [jax.ShapeDtypeStruct(leaf.shape, leaf.dtype) for leaf in jax.tree.leaves(shapes[1])]
    cts = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in body.outvars]
    backward = jax.make_jaxpr(lambda res, ct: jax.tree.unflatten(tree, res)(ct))(residuals, cts)
    return {"forward": program_data.encode_with_policies(forward, filename, forward=True)[0],
            "backward": program_data.encode_with_policies(backward, filename, forward=True)[0],
            "residuals": len(residuals)}


@_guarded
@_remembered
@_in_learner_thread
def program(sol, seed, x, features):
    """The learner's program as x -> output, traced with jax.make_jaxpr with a tap (an identity
    jitted under the name `call_<k>`) on each applied module call, sent as data for the judge to
    rebuild, run and read (graders/kit/program.py; init's part computed here, see `sendable`):
    {"program": the program or {"unreadable": why}, "calls": [{"role", "traced_in", "lifted"},
    ...] (numbered as they return: a model's call after its layers'; role FIRST, SECOND or None
    for a module that is not a Dense layer; traced_in: whether it ran inside a remat2 at all,
    dead code included; lifted: for each remat2 around it, outermost first, whether it is Linen's
    nn.checkpoint, as Flax's scope and JAX's debug info say), "remats": remat2 equations in the
    traced program, dead code included, "own_policies": for each remat2 of the program sent
    (by its index in graders.kit.jaxpr.find) whose policy is the learner's own function, JAX's
    programs of its gradient under that policy: {"index", "policy", **policy_programs}}. The roles, the
    counts of the whole trace and the lifts word the messages and mark the calls; every verdict
    is the judge's, on the program it rebuilt."""
    x = jnp.asarray(x, jnp.float32)

    def run():
        taps = Taps(x.shape[-1], marks=True)
        with nn.intercept_methods(taps):
            return taps, jax.make_jaxpr(lambda x: _call(sol, seed, x, features))(x)

    taps, closed = _afresh(run, lambda found: any(role for role, _ in found[0].calls))
    traced = closed.jaxpr
    around = {tap_name(e): tuple(o for o in outer if jaxpr.is_a(o, "checkpoint"))
              for e, outer in jaxpr.walk_nested(traced) if tap_name(e).startswith(PREFIX)}
    calls = []
    for k, (role, linen) in enumerate(taps.calls):
        remats = around.get(f"{PREFIX}call_{k}", ())
        # Linen's own: JAX traced its body from Flax's lift, and Flax's scope agrees.
        calls.append({"role": role, "traced_in": bool(remats),
                      "lifted": [bool(linen) and traced_by_linen_lift(r) for r in remats]})
    try:
        sent = sendable(closed)
    except Exception as exc:  # noqa: BLE001 (what JAX's partial evaluation refuses is reported)
        return {"program": {"unreadable": f"what the grader cannot separate from x ({type(exc).__name__})"},
                "calls": calls, "remats": jaxpr.count(traced, "checkpoint"), "own_policies": []}
    message, _ = program_data.encode_with_policies(sent, sol.__file__, forward=True)
    own = []
    if "program" in message:
        for i, eqn in enumerate(jaxpr.find(sent.jaxpr, "checkpoint")):
            policy = eqn.params.get("policy")
            if policy is None or program_data.policy_name(policy) is not None:
                continue
            # A policy of the learner's own is Python code, which the judge does not run: what it
            # saves travels as the programs JAX makes of the checkpoint's body under it, for the
            # judge to run and read (`policy_programs`).
            own.append({"index": i, "policy": show_policy(eqn), **policy_programs(eqn, sol.__file__)})
    return {"program": message, "calls": calls, "remats": jaxpr.count(traced, "checkpoint"), "own_policies": own}
