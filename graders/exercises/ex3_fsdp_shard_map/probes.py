"""Probes for Exercise 3: the learner's FSDP loss traced on the meshes the checks name, at the
inputs the checks drew, and sent to the judge as programs (graders/kit/program.py, issue 31).

What comes back: the program of make_fsdp_loss(mesh)'s loss and of its jax.value_and_grad on
each mesh; of its jax.grad on an Auto mesh; of jax.value_and_grad of a fresh import's fsdp_loss.
The judge rebuilds them on its own devices, runs them on its own inputs and reads them with the
functions below (summarize: what makes the loss, the shard_map's specs, how its inputs were made,
the collectives its output is computed from); it compiles them itself for FLOPs and collectives.
A JAX error that the checks turn into advice comes back as {"problem": {"kind": ...}}; the words
are the checks'. Nothing here knows an expected value, and nothing sent here is believed.
"""

import contextlib
import functools

import jax
import numpy as np
from jax._src import core
from jax._src.pjit import jit_p
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from graders.kit import jaxpr, program, verdicts
from graders.kit.probing import probe

AXIS = "fsdp"
ROWS = P(AXIS, None)
WEIGHTS = ("w1", "w2")  # p's leaves in jax's flattening order: the traced loss's first two inputs


@functools.cache
def mesh(n: int, auto: bool = False):
    """A 1-D mesh named "fsdp" over the first n devices (Explicit axes, 0.12's default)."""
    kind = AxisType.Auto if auto else AxisType.Explicit
    return jax.make_mesh((n,), (AXIS,), axis_types=(kind,), devices=jax.devices()[:n])


def placed(m, p, x, y):
    """float32 copies of the inputs, every one split by rows across the mesh: P("fsdp", None)."""
    rows = NamedSharding(m, ROWS)
    put = lambda a: jax.device_put(np.asarray(a, np.float32), rows)  # noqa: E731
    return {k: put(v) for k, v in p.items()}, put(x), put(y)


# ---- what comes back instead of a value ------------------------------------------------------

class _Problem(Exception):
    """Something the checks explain in their own words: {"problem": {"kind": ..., **details}}."""

    def __init__(self, kind: str, **details):
        super().__init__(kind)
        self.data = {"kind": kind, **details}


def reports(fn):
    """A probe whose _Problem comes back as data (the check then says what it means)."""
    @functools.wraps(fn)
    def wrapped(sol, *args, **kwargs):
        try:
            return fn(sol, *args, **kwargs)
        except _Problem as problem:
            return {"problem": problem.data}
    return wrapped


@contextlib.contextmanager
def on_mesh(m):
    """jax.set_mesh(m), with JAX's errors about the learner's shard_map reported as problems."""
    try:
        with jax.set_mesh(m):
            yield
    except ValueError as exc:
        text = str(exc)
        if "in_specs passed to shard_map" in text and "does not match" in text:
            raise _Problem("in_specs_mismatch", text=text.split(". ")[0]) from None
        if "should match the mesh passed to shard_map" in text:
            raise _Problem("rebound", text=text.split(". ")[0]) from None
        raise
    except TypeError as exc:
        if "in_specs" in str(exc) and "Auto" in str(exc):
            raise _Problem("in_specs_not_inferred") from None
        raise


def learner_loss(sol, m):
    factory = getattr(sol, "make_fsdp_loss", None)
    if not callable(factory):
        raise _Problem("no_make_fsdp_loss")
    f = factory(m)
    if not callable(f):
        raise _Problem("not_a_function", type=type(f).__name__)
    return f


def fresh_fsdp_loss(sol):
    """The module-level fsdp_loss of a fresh import of the learner's file: a shard_map made without
    mesh= binds to the first mesh it meets, so each mesh gets a module of its own, as a program
    that sets one mesh and then imports the module would."""
    module = verdicts.imported_afresh(sol, f"{sol.__name__}_fresh")
    f = getattr(module, "fsdp_loss", None)
    if not callable(f):
        raise _Problem("no_fsdp_loss")
    return f


# ---- plain data ------------------------------------------------------------------------------

def _axis(name):
    if name is None or isinstance(name, (str, int, bool)):
        return name
    if isinstance(name, (tuple, list)):
        return tuple(_axis(a) for a in name)
    return str(name)


def spec_data(spec) -> dict:
    """A PartitionSpec as text (for messages) and parts (None, an axis name, or a tuple of them;
    {"unconstrained": True} for P.UNCONSTRAINED), so the checks can rebuild it."""
    parts = []
    for part in spec:
        parts.append({"unconstrained": True} if part is P.UNCONSTRAINED else _axis(part))
    return {"text": str(spec), "parts": parts,
            "unreduced": sorted(map(str, getattr(spec, "unreduced", ()) or ())),
            "reduced": sorted(map(str, getattr(spec, "reduced", ()) or ()))}


def sharding_data(sharding, shape) -> dict:
    """Where an array of this sharding lives: its spec as text, its memory kind, and for every
    device (by id) the [start, stop, step] of each dimension it holds."""
    indices = sharding.devices_indices_map(tuple(shape))
    held = sorted([device.id, [list(s.indices(n)) for s, n in zip(index, shape)]]
                  for device, index in indices.items())
    return {"spec": str(getattr(sharding, "spec", sharding)), "memory_kind": sharding.memory_kind, "rows": held}


def unwrapped(value):
    """The value a loss is made from by reshaping or casting alone (x[0], squeeze, reshape,
    astype of a one-element result), else the loss itself: a shard_map that returns the loss as
    shape (1,) and is indexed outside still gives the loss as its own result."""
    while value.eqn is not None and value.eqn.primitive.name in jaxpr.SHAPE_ONLY:
        operands = [v for v in value.parents if v.const is None]
        size = lambda aval: int(np.prod(aval.shape))  # noqa: E731
        if len(operands) != 1 or size(value.eqn.invars[0].aval) != size(value.eqn.outvars[value.index].aval):
            break
        value = operands[0]
    return value


def primitive(value) -> str:
    """What made a value, as the learner wrote it (never the traced program's own name)."""
    return "a constant" if value.eqn is None else jaxpr.said(value.eqn.primitive.name)


# ---- probes: the learner's programs, sent as data (graders/kit/program.py) -------------------

# Without --sandbox the probes run in the judge's own process (graders/child/probe_channel.py's
# Local), where sending a program through the wire and rebuilding it there would only cost the
# learner's edit loop time. The judge puts a nonce of its own here before its first probe call
# (checks.nonce); a probe that finds it runs in the judge's process, files each program it sent
# here, its encoding and the traced program itself (IN_PROCESS[(nonce, probe, n, kind)]), and
# replies HANDED in its place; the judge takes them back only from its own process's dict, and
# reads and runs the traced program in place of the rebuilt one. Under --sandbox nothing the
# worker does reaches that dict, and the judge decodes what the worker sent. Either way the program
# is first encoded, so what cannot be sent is refused alike (its reason is sent, never handed
# over), and what is handed over is the program as the judge would rebuild it (as_sent).
IN_PROCESS: dict = {}
HANDED = {"in_process": 1}


def _encoded(closed, sol, *key) -> dict:
    # forward=True: the judge only runs these programs forwards (a gradient program already holds
    # its backward pass), so a custom_jvp/custom_vjp call that remains is sent as its primal
    message = program.encode_or_reason(closed, getattr(sol, "__file__", ""), forward=True, meshes=True)
    judge = IN_PROCESS.get("judge")
    if judge is None or "program" not in message:
        return message
    IN_PROCESS[(judge, *key)] = (message, as_sent(closed))
    return dict(HANDED)


def as_sent(closed, memo=None):
    """The traced program as the judge rebuilds it from its encoding (forward=True): each
    custom_jvp/custom_vjp call, at any depth, a jit of its primal program named after it
    (program._as_jit, as the encoder writes it); every other equation as it was traced."""
    memo = {} if memo is None else memo
    if id(closed) in memo:
        return memo[id(closed)]

    def param(value):
        if isinstance(value, core.Jaxpr):
            return as_sent(value, memo)
        if type(value) in (tuple, list):
            new = type(value)(param(v) for v in value)
            return value if all(a is b for a, b in zip(new, value)) else new
        return value

    eqns = []
    for eqn in closed.eqns:
        params = {k: param(v) for k, v in eqn.params.items()}
        if eqn.primitive.name in program.CUSTOM:
            eqn = eqn.replace(primitive=jit_p, params=program._as_jit(
                params, len(eqn.invars), len(eqn.outvars), eqn.primitive.name))
        elif any(params[k] is not v for k, v in eqn.params.items()):
            eqn = eqn.replace(params=params)
        eqns.append(eqn)
    same = all(a is b for a, b in zip(eqns, closed.eqns))
    memo[id(closed)] = out = closed if same else closed.replace(eqns=eqns)
    return out


@probe
@reports
def programs(sol, n, p, x, y):
    """make_fsdp_loss(mesh) on an n-device mesh, traced at these inputs' shapes and shardings:
    the program of its loss and the program of its jax.value_and_grad, as data."""
    m = mesh(n)
    args = placed(m, p, x, y)
    with on_mesh(m):
        f = learner_loss(sol, m)
        loss, shape = jax.make_jaxpr(f, return_shape=True)(*args)
        if getattr(shape, "shape", None) != ():
            raise _Problem("not_a_scalar", shape=str(shape))
        both = jax.make_jaxpr(jax.value_and_grad(f))(*args)
    return {"loss": _encoded(loss, sol, "programs", n, "loss"),
            "value_and_grad": _encoded(both, sol, "programs", n, "value_and_grad")}


@probe
@reports
def auto_gradient_program(sol, n, p, x, y):
    """The program of jax.grad of make_fsdp_loss(mesh), traced on an n-device mesh whose axis is
    Auto (where a gradient's sharding is what the compiled program makes, not its type)."""
    m = mesh(n, auto=True)
    with on_mesh(m):
        closed = jax.make_jaxpr(jax.grad(learner_loss(sol, m)))(*placed(m, p, x, y))
    return _encoded(closed, sol, "auto_gradient_program", n, None)


@probe
@reports
def fresh_program(sol, n, p, x, y):
    """The program of jax.value_and_grad of the module-level fsdp_loss of a fresh import, traced
    under jax.set_mesh of n devices."""
    f = fresh_fsdp_loss(sol)
    m = mesh(n)
    args = placed(m, p, x, y)
    with on_mesh(m):
        closed = jax.make_jaxpr(jax.value_and_grad(f))(*args)
    return _encoded(closed, sol, "fresh_program", n, None)


# ---- reading a program (the judge, on the program it rebuilt) --------------------------------

def body_of(smap):
    """(inputs, outputs) of a shard_map's body as dataflow, followed into every jit, checkpoint and
    custom_vjp/custom_jvp function it calls: a gather written inside any of them is seen."""
    body = smap.params["jaxpr"]
    inner = getattr(body, "jaxpr", body)
    return jaxpr.dataflow(inner, getattr(body, "consts", ()), through=jaxpr.EVERY_CALL)


# The collectives a shard_map body can hold, by the lax function that binds each (lax.pmean binds
# a psum), and the parameter naming the mesh axes each runs over.
COLLECTIVES = {"all_gather": "lax.all_gather", "all_gather_invariant": "lax.all_gather",
               "psum": "lax.psum", "psum_invariant": "lax.psum", "pmax": "lax.pmax", "pmin": "lax.pmin",
               "ppermute": "lax.ppermute", "all_to_all": "lax.all_to_all", "reduce_scatter": "lax.psum_scatter"}


def _axes_of(eqn) -> tuple:
    axes = eqn.params.get("axes", eqn.params.get("axis_name", ()))
    return tuple(_axis(a) for a in (axes if isinstance(axes, (tuple, list)) else (axes,)))


def collectives_data(value, body_inputs) -> list:
    """Every collective that `value` is computed from, at any depth of the body: which lax
    function, over which axes, and which of the shard_map's inputs (by position) flow into it. A
    collective inside a scan, cond or while loop counts with everything that loop takes in."""
    found, sites = [], set()
    for v in jaxpr.ancestors(value):
        if v.eqn is None or id(v.site) in sites:
            continue
        sites.add(id(v.site))  # one execution of an equation, whichever of its outputs is used
        held = [e for e in (v.eqn, *jaxpr.inside(v.eqn)) if e.primitive.name in COLLECTIVES]
        if not held:
            continue
        reach = {id(u) for u in jaxpr.ancestors(v)}
        inputs = [j for j, u in enumerate(body_inputs) if id(u) in reach]
        found += [{"function": COLLECTIVES[e.primitive.name], "axes": _axes_of(e), "inputs": inputs} for e in held]
    return found


def primitive_names(closed) -> set:
    """The program's primitives, a custom_jvp/custom_vjp function sent as a jit of its primal
    (graders/kit/program.py) named as what it was."""
    return {e.params.get("name") if e.primitive.name == "jit" and e.params.get("name") in program.CUSTOM
            else e.primitive.name for e in jaxpr.walk(closed)}


def summarize(closed):
    """A loss program (rebuilt by the judge), summarised: how many outputs; what makes the loss;
    if that is a shard_map, its specs, how each of its inputs was made, and the collectives its
    output is computed from inside (with the inputs each depends on); if not, the primitives of
    the program and the out_specs of any shard_map the loss comes from."""
    inputs, outputs = jaxpr.dataflow(closed, getattr(closed, "consts", ()))
    summary = {"outputs": len(outputs)}
    if len(outputs) != 1:
        return summary
    out = unwrapped(outputs[0])
    summary.update(made_by=primitive(out), is_shard_map=out.eqn is not None and jaxpr.is_a(out.eqn, "shard_map"))
    if not summary["is_shard_map"]:
        upstream = {id(v.eqn): v.eqn for v in jaxpr.ancestors(out)
                    if v.eqn is not None and jaxpr.is_a(v.eqn, "shard_map")}
        summary.update(
            primitives=sorted(primitive_names(closed)),
            shard_maps=len(jaxpr.find(closed, "shard_map")),
            upstream=len(upstream),
            upstream_out_specs=[spec_data(s) for e in upstream.values() for s in e.params["out_specs"]])
        return summary
    smap, index = out.eqn, out.index
    body_inputs, body_outputs = body_of(smap)
    summary.update(
        index=index,
        out_spec=spec_data(smap.params["out_specs"][index]),
        entering=[{"input": next((i for i, u in enumerate(inputs) if u is v), None),
                   "made_by": primitive(v) if v.eqn is not None else None,
                   "shape": tuple(smap.invars[j].aval.shape),
                   "in_spec": spec_data(smap.params["in_specs"][j])}
                  for j, v in enumerate(out.parents)],
        collectives=collectives_data(body_outputs[index], body_inputs))
    return summary
