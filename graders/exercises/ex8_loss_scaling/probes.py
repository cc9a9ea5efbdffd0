"""Probes for Exercise 8: the learner's scale rule, all_finite and scaled_grads run and read into
plain data (numbers, float64 arrays, dtype names), and the programs of scaled_grads and of the
training loop sent as data (graders/kit/program.py). The checks (graders/exercises/ex8_loss_scaling/checks.py)
compute every expected value, and rebuild, read and run the programs with the plain functions here
marked "Run in the judge" (no @probe: they never see the learner's module).

The training loop is sent in three steps, cheapest first, so that an unrolled loop is named
before anything is compiled: traced at a few steps (loop_sizes: the judge counts its equations),
then at more (lowered_sizes: the judge lowers it), and only then at full length (train): the judge
runs it from each start the checks read (`runs`), reads its structure (`program_summary`), and
runs its first step on its own (`first_steps`: the program up to the loop evaluated on other
inputs to get what the loop is given, and one step of its body run on that, whatever spelled the
loop: scan, fori_loop, while_loop).

What the learner returns is read where it is: a result of the wrong structure fails with the
grader's message (it names the type that came back). Readings that a check makes only later (e.g.
the final DynScale of a training run) are `reading`s: the value, or the verdict reading it would
have given, with WHAT standing for the check's own words, so that each check fails where and as it
always did.
"""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from graders.kit import jaxpr, program as program_data, verdicts
from graders.kit.verdicts import CheckFailed, fail, where
from graders.kit.numeric import as_array
from graders.kit.probing import probe

KEYS = ("w1", "b1", "w2", "b2")
WHAT = "\x00what\x00"  # in a reading's message: the check's own description of the call

_jitted: dict = {}  # (id(sol), name) -> (sol, jax.jit(sol.name)): one compile for every call
# Without --sandbox the probes run in the judge's own process, which set its nonce here
# (IN_PROCESS["judge"], checks.py): scaled_grads_program then also files the learner's jitted
# scaled_grads (IN_PROCESS[(nonce, "scaled_grads")]) with the program traced, the function the
# learner's calls (probe scaled_grads) compile; where that function's own trace is the program read
# (a function whose trace changes between calls is not), the judge runs it through that function:
# one compilation, where compiling the program it rebuilt made a second of the same program. Under
# --sandbox nothing the worker does reaches this dict, and the judge compiles the program it rebuilt.
IN_PROCESS: dict = {}


# ---------------------------------------------------------------- helpers

def learner_dir(sol) -> Path:
    return Path(sol.__file__).resolve().parent


def traced(sol, fn, *args):
    """fn(*args), turning a Python decision on a traced value into a message that says so."""
    try:
        return fn(*args)
    except (jax.errors.TracerBoolConversionError, jax.errors.ConcretizationTypeError,
            jax.errors.TracerIntegerConversionError, jax.errors.TracerArrayConversionError) as exc:
        fail(f"your code converts a traced value to a Python bool or number{where(exc, learner_dir(sol))}: "
             "inside jax.jit and lax.scan, `finite` and the scale are tracers, so a Python `if` "
             "(or `and`, `or`, `bool()`, `float()`, `np.asarray`) cannot decide on them. Hint: choose with "
             "jnp.where(finite, a, b) or lax.select, and skip an update by selecting the old values.")


def jitted(sol, name: str):
    key = (id(sol), name)
    if key not in _jitted or _jitted[key][0] is not sol:
        _jitted[key] = (sol, jax.jit(getattr(sol, name)))
    return _jitted[key][1]


def arrays(tree):
    """What the judge sent (NumPy arrays) as the JAX arrays the checks always passed."""
    return jax.tree.map(jnp.asarray, tree)


def state(sol, scale, good):
    return sol.DynScale(jnp.float32(scale), jnp.int32(good))


def reading(sol, fn, *args) -> dict:
    """{"ok": fn(*args)}, or {"verdict": (outcome, message)} for what reading it raised: the
    check that reads it later fails there with this verdict (see read_value)."""
    try:
        return {"ok": fn(*args)}
    except Exception as exc:  # a ProbeTimeout (BaseException) is not a reading's verdict
        return {"verdict": verdicts.classify(exc, sol, learner_dir(sol), 0.0)}


def read_value(value_reading, what: str = ""):
    """The judge's side of `reading`: the value, or the verdict with the check's own words. The
    reading came from the process that runs the learner's code: a verdict in it can only fail
    the check (or say "not attempted"), as graders/child/probe_channel.py's replies can."""
    if isinstance(value_reading, dict) and set(value_reading) == {"ok"}:
        return value_reading["ok"]
    verdict = value_reading.get("verdict") if isinstance(value_reading, dict) and len(value_reading) == 1 else None
    if (isinstance(verdict, (tuple, list)) and len(verdict) == 2 and verdict[0] in ("failed", "not_attempted")
            and isinstance(verdict[1], str)):
        raise verdicts.Verdict(verdict[0], verdict[1].replace(WHAT, what)[:2000])
    raise verdicts.Verdict("failed", "the process running your code sent back something no probe sends")


# ---------------------------------------------------------------- reading results

def scale_state(value, what: str) -> tuple:
    """(scale, good_steps, scale dtype name, good_steps dtype name) from a returned DynScale."""
    if not isinstance(value, tuple) or len(value) != 2:
        fail(f"{what} should return a DynScale(scale, good_steps), got {type(value).__name__}.")
    scale, good = value
    s_dtype, g_dtype = jnp.asarray(scale).dtype, jnp.asarray(good).dtype
    return float(np.asarray(scale, np.float64)), int(np.asarray(good)), str(s_dtype), str(g_dtype)


def as_flag(value, what: str) -> bool:
    array = np.asarray(value) if not isinstance(value, (str, bytes, dict)) and value is not None else None
    if array is None or array.shape != () or array.dtype != np.bool_:
        fail(f"{what} should be a boolean array of shape (), got {type(value).__name__} "
             f"{getattr(array, 'dtype', '')} {getattr(array, 'shape', '')}. "
             "Hint: jnp.all(...) of jnp.isfinite(...) gives one.")
    return bool(array)


def grads_of(result, what: str, shapes: dict):
    """(grads dict of float64 arrays, the leaves as returned, finite flag) from (grads, finite)."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        fail(f"{what} should return a pair (grads, finite), got {type(result).__name__}.")
    grads, finite = result
    if not isinstance(grads, dict) or set(grads) != set(KEYS):
        fail(f"{what}: grads should be a dict with the keys of params {list(KEYS)}, got "
             f"{sorted(grads) if isinstance(grads, dict) else type(grads).__name__}.")
    f64 = {k: as_array(grads[k], f"{what}: grads['{k}']", shapes[k]) for k in KEYS}
    return f64, grads, finite


def per_step(run, what: str, steps: int):
    _, _, scales, finites, losses = run
    return (as_array(scales, f"{what}: scales", (steps,)), np.asarray(finites).astype(bool).reshape(-1),
            as_array(losses, f"{what}: losses", (steps,)))


def params_of(run, what: str):
    params = run[0]
    if not isinstance(params, dict) or set(params) != set(KEYS):
        fail(f"{what}: the returned params should be a dict with keys {list(KEYS)}, got {type(params).__name__}.")
    return params


# ---------------------------------------------------------------- dyn_scale_step

@probe
def dyn_scale_step(sol, what, scale, good, finite, *args):
    """dyn_scale_step(DynScale(float32(scale), int32(good)), jnp.asarray(finite), *args), read."""
    return scale_state(sol.dyn_scale_step(state(sol, scale, good), jnp.asarray(finite), *args), what)


@probe
def dyn_scale_step_jit(sol, what, scale, good, finite, period, factor, min_scale):
    step = jax.jit(lambda ls, f: sol.dyn_scale_step(ls, f, period, factor, min_scale))
    return scale_state(traced(sol, step, state(sol, scale, good), jnp.asarray(finite)), what)


@probe
def dyn_scale_step_scan(sol, flags, s0, period, factor, min_scale):
    """(scales, good_steps) per step of lax.scan with dyn_scale_step as the body."""
    def body(ls, f):
        new = sol.dyn_scale_step(ls, f, period, factor, min_scale)
        new = sol.DynScale(jnp.asarray(new[0], jnp.float32), jnp.asarray(new[1], jnp.int32))
        return new, (new.scale, new.good_steps)

    _, (scales, goods) = traced(sol, lambda fs: lax.scan(body, state(sol, s0, 0), fs), jnp.asarray(flags))
    return np.asarray(scales, np.float64), np.asarray(goods)


# ---------------------------------------------------------------- all_finite

@probe
def all_finite(sol, trees, jit, whats):
    """[all_finite(tree) for tree in trees] (under jax.jit when `jit`), each a reading of a bool:
    a case that raises says so in its own check's words, naming the tree it was given."""
    fn = jitted(sol, "all_finite") if jit else sol.all_finite
    return [reading(sol, lambda t=tree, w=what: as_flag(traced(sol, fn, arrays(t)), w))
            for tree, what in zip(trees, whats)]


# ---------------------------------------------------------------- scaled_grads

@probe
def scaled_grads(sol, params, x, y, scale, what):
    """jax.jit(scaled_grads)(params, x, y, float32(scale)): the gradients as float64 arrays, and
    readings of their dtypes and of the finite flag."""
    params, x, y = arrays((params, x, y))
    shapes = {k: tuple(v.shape) for k, v in params.items()}
    f64, leaves, finite = grads_of(traced(sol, jitted(sol, "scaled_grads"), params, x, y, jnp.float32(scale)),
                                   what, shapes)
    return {"grads": f64,
            "dtypes": reading(sol, lambda: {k: str(jnp.asarray(leaves[k]).dtype) for k in KEYS}),
            "finite": reading(sol, as_flag, finite, f"{what}: finite")}


@probe
def scaled_grads_program(sol, params, x, y, scale):
    """scaled_grads(params, x, y, scale)'s program, traced with all four as inputs, as data for the
    judge to read and run (graders/kit/program.py), or {"error": why it cannot be traced}."""
    params, x, y = arrays((params, x, y))
    try:
        closed = jax.make_jaxpr(lambda q, xx, yy, s: traced(sol, sol.scaled_grads, q, xx, yy, s))(
            params, x, y, jnp.float32(scale))
    except CheckFailed as exc:
        return {"error": str(exc)}
    judge = IN_PROCESS.get("judge")
    if judge is not None:
        IN_PROCESS[(judge, "scaled_grads")] = (jitted(sol, "scaled_grads"), closed)
    return program_data.encode_or_reason(closed, getattr(sol, "__file__", ""), forward=True)


def grads_reading(closed, params, data, scales, called=None) -> dict:
    """What the judge reads of scaled_grads' program (rebuilt from what the worker sent): the operand
    dtypes of every dot_general of the live program (a decoy computed and discarded is not in it),
    and the gradients it computes, run here, on each data set (params, x, y) of `data` at each
    scale of `scales` ({"grads": [[flat float64 gradient per scale] per data set]}); or {"error":
    why it is not a program of scaled_grads' inputs and results}. Run in the judge: compiled from
    the program itself, or (`called`, without --sandbox: IN_PROCESS, the learner's jitted
    scaled_grads and the program traced) by calling that function where its own trace (JAX's, of
    the call) is the traced program, equation for equation: one compilation for the learner's calls
    and this."""
    leaves = jax.tree.leaves((params, data[0][1], data[0][2], np.float32(1)))
    want_in = [(tuple(np.shape(a)), "float32") for a in leaves]
    got_in = [(tuple(v.aval.shape), str(v.aval.dtype)) for v in closed.invars]
    if got_in != want_in:
        return {"error": f"the program sent for scaled_grads takes inputs {got_in}, not the grader's (params, x, y, "
                         f"scale) {want_in}"}
    shapes = [tuple(np.shape(params[k])) for k in KEYS]  # a dict's leaves: in the order of its sorted keys
    got_out = [tuple(v.aval.shape) for v in closed.outvars]
    if got_out[:len(KEYS)] != [tuple(np.shape(params[k])) for k in sorted(KEYS)] or len(got_out) != len(KEYS) + 1:
        return {"error": f"the program sent for scaled_grads returns values of shapes {got_out}, not the gradients "
                         f"of params (a dict of shapes {dict(zip(KEYS, shapes))}) and finite"}
    compiled = jax.jit(jax.extend.core.jaxpr_as_fun(closed))
    function = _traced_as_read(called, data[0], np.float32(1))

    def run(p, xx, yy, scale):
        if function is not None:
            try:
                outs = jax.tree.leaves(function(*arrays((p, xx, yy)), jnp.float32(scale)))
                if [tuple(np.shape(o)) for o in outs] == got_out:
                    return outs
            except Exception:  # noqa: BLE001 (the program itself is run, and says what is wrong)
                pass
        return compiled(*jax.tree.leaves((p, xx, yy, np.float32(scale))))

    grads = []
    for p, xx, yy in data:
        per_scale = []
        for scale in scales:
            outs = run(p, xx, yy, scale)
            by_key = dict(zip(sorted(KEYS), outs[:len(KEYS)]))
            per_scale.append(np.concatenate([np.asarray(by_key[k], np.float64).ravel() for k in KEYS]))
        grads.append(per_scale)
    return {"dots": [[str(v.aval.dtype) for v in e.invars] for e in jaxpr.find(jaxpr.live(closed), "dot")],
            "grads": grads}


def _traced_as_read(called, example, scale):
    """The learner's jitted function of `called` (function, program traced), where JAX's own trace of
    a call at these arguments is that program equation for equation (the trace a call compiles), else
    None: a function whose trace changes between traces is judged on the program read, run as such."""
    if called is None:
        return None
    function, traced_program = called
    try:
        outer = jax.make_jaxpr(function)(*arrays(example), jnp.float32(scale))
        inner = outer.eqns[0].params["jaxpr"] if len(outer.eqns) == 1 else None
    except Exception:  # noqa: BLE001 (the program read is run instead)
        return None
    return function if inner is not None and str(inner) == str(traced_program) else None


# ---------------------------------------------------------------- train_fp16_dynamic

def train_program(sol, params, x, y, ls, steps, tx, return_shape=False):
    """The traced train_fp16_dynamic(q, xx, yy, l, steps, tx) as a function of (q, l, xx, yy) (a
    ClosedJaxpr): the data are inputs, so the program can be run on other data. With
    return_shape, also the shapes of what it returns, in their containers."""
    # A training function compiled ahead of time is read as the jit it was compiled from, where a
    # training script calls it (at the top level only: inside its own jit a real run refuses it).
    with program_data.compiled_calls_traced() as compiled:
        train = compiled.top(lambda q, l, xx, yy: sol.train_fp16_dynamic(q, xx, yy, l, steps, tx))
        return traced(sol, jax.make_jaxpr(train, return_shape=return_shape), params, ls, x, y)


def callable_as_the_stub(sol):
    """Fail with the signature when train_fp16_dynamic cannot take the stub's six arguments."""
    import inspect

    try:
        signature = inspect.signature(sol.train_fp16_dynamic)
    except (TypeError, ValueError):  # no signature to read: the call will say
        return
    try:
        signature.bind("params", "x", "y", "ls0", "steps", "tx")
    except TypeError as exc:
        fail(f"train_fp16_dynamic{signature} cannot be called as train_fp16_dynamic(params, x, y, ls0, steps, tx) "
             f"({exc}). Hint: keep the stub's signature: the grader passes the optimizer as tx (static under jit).")


def equations(program) -> int:
    return sum(1 for _ in jaxpr.walk(getattr(program, "jaxpr", program)))


def send(sol, closed) -> dict:
    return program_data.encode_or_reason(closed, getattr(sol, "__file__", ""), forward=True)


@probe
def loop_sizes(sol, params, x, y, scale, lr, steps_list):
    """{"programs": {steps: the traced loop, as data}} for each number of steps (tracing a few
    steps costs little even when every step is unrolled in Python), or {"error": why the loop
    cannot be traced}. The judge counts their equations (`equations`)."""
    params, x, y = arrays((params, x, y))
    tx = optax.adam(lr)
    callable_as_the_stub(sol)
    try:
        return {"programs": {n: send(sol, train_program(sol, params, x, y, state(sol, scale, 0), n, tx))
                             for n in steps_list}}
    except CheckFailed as exc:
        return {"error": str(exc)}


def unroll_of(eqn) -> int:
    """How many steps one iteration of a scan's compiled loop holds."""
    unroll = eqn.params.get("unroll", 1)
    return int(eqn.params["length"]) if unroll is True else max(1, int(unroll))


@probe
def lowered_sizes(sol, params, x, y, scale, lr, steps_list):
    """{steps: the traced loop, as data}, for the judge to lower (`lowered_size`)."""
    params, x, y = arrays((params, x, y))
    tx = optax.adam(lr)
    return {n: send(sol, train_program(sol, params, x, y, state(sol, scale, 0), n, tx)) for n in steps_list}


def lowered_size(closed) -> dict:
    """{"lines": lines of the program handed to XLA (StableHLO), "unroll": the largest unroll of
    its scans}: a scan whose steps are unrolled (unroll=True) is one scan in the jaxpr, but one
    copy of the step per step in what XLA compiles. Run in the judge, on a rebuilt program."""
    avals = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in closed.invars]
    text = jax.jit(jax.extend.core.jaxpr_as_fun(closed)).lower(*avals).as_text()
    return {"lines": text.count("\n"), "unroll": max((unroll_of(e) for e in jaxpr.find(closed, "scan")), default=1)}


def is_loop(eqn, steps: int) -> bool:
    """A scan of length `steps` (lax.scan, or fori_loop with static bounds) or a while loop."""
    return (jaxpr.is_a(eqn, "scan") and eqn.params["length"] == steps) or eqn.primitive.name == "while"


def training_loops(program, steps: int) -> list:
    """(eqn, enclosing equations) of the outermost loops that hold the model (a dot_general)."""
    found = []
    for eqn, outer in jaxpr.walk_nested(program):
        if (is_loop(eqn, steps) and any(jaxpr.is_a(e, "dot") for e in jaxpr.inside(eqn))
                and not any(o is f for f, _ in found for o in outer)):
            found.append((eqn, outer))
    return found


def live_program(closed):
    """The program without what never reaches its results (JAX's own dead-code removal, inside
    jits and loop bodies too), with every input kept so that it runs on the same arguments."""
    from jax._src.interpreters import partial_eval as pe

    pruned, _ = pe.dce_jaxpr(closed.jaxpr, [True] * len(closed.jaxpr.outvars), instantiate=True)
    return pruned


def program_summary(live, steps: int) -> dict:
    """What the checks read from the live traced loop: how many loops hold the model, the lengths
    of its scans, whether the loop is inside a jit, and the operand dtypes of every dot_general
    and how many of them the loop holds."""
    loops = training_loops(live, steps)
    return {"loops": len(loops), "scan_lengths": jaxpr.scan_lengths(live),
            "in_jit": bool(loops) and any(jaxpr.is_a(e, "jit") for e in loops[0][1]),
            "dots": [[str(v.aval.dtype) for v in e.invars] for e in jaxpr.find(live, "dot")],
            "dots_in_loop": sum(1 for e in jaxpr.inside(loops[0][0]) if jaxpr.is_a(e, "dot")) if loops else 0}


# ---------------------------------------------------------------- one step of the loop, on its own

def _parts(eqn, ops):
    """(body as a function, its constant operands, the carry, the per-step operands) of a loop."""
    from jax.extend.core import jaxpr_as_fun

    if eqn.primitive.name == "while":
        skip, n = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
        return jaxpr_as_fun(eqn.params["body_jaxpr"]), list(ops[skip:skip + n]), list(ops[skip + n:]), []
    consts, carry, xs = (list(part) for part in eqn.params["ft_in"].update(list(ops)).unpack())
    return jaxpr_as_fun(eqn.params["jaxpr"]), consts, carry, xs


def first_step_function(live, consts, loop):
    """A jitted f(*args) -> (carry in, carry out) of the first step of `loop`, an equation of
    `live` (inside its jits, checkpoints or custom derivatives), when the program runs on args:
    what the loop is given, and what one step of its body makes of it."""
    from jax.extend.core import ClosedJaxpr, Jaxpr

    def holds(eqn):
        return any(e is loop for e in jaxpr.inside(eqn))

    def run(*args):
        found = []

        def apply(eqn, ins):
            if eqn is loop:
                found.append(ins)
                return [program_data.zeros_of(v.aval) if program_data.is_key(v.aval.dtype)
                        else jnp.zeros(v.aval.shape, v.aval.dtype) for v in eqn.outvars]
            if holds(eqn):  # a checkpoint or custom derivative around the loop: run its body
                for sub in eqn.params.values():
                    inner = getattr(sub, "jaxpr", sub)
                    if isinstance(inner, Jaxpr) and len(inner.invars) == len(ins) and any(
                            e is loop for e in jaxpr.walk(inner)):
                        return jaxpr.evaluate(inner, sub.consts if isinstance(sub, ClosedJaxpr) else [], ins, apply)
            return jaxpr.bind(eqn, ins)

        jaxpr.evaluate(live, consts, args, apply)
        if not found:
            return None
        body, body_consts, carry, xs = _parts(loop, found[0])
        index = loop.params.get("length", 1) - 1 if loop.params.get("reverse") else 0
        outs = body(*body_consts, *carry, *[x[index] for x in xs])
        return carry, list(outs[:len(carry)])

    return jax.jit(run)


def param_slots(carry, params) -> dict:
    """{key: index of the carry that holds params[key]} at the first step (equal bit for bit)."""
    slots = {}
    for k in KEYS:
        want = np.asarray(params[k])
        for i, value in enumerate(carry):
            v = np.asarray(value)
            if i not in slots.values() and v.shape == want.shape and v.dtype == want.dtype and np.array_equal(v, want):
                slots[k] = i
                break
    return slots


def first_steps(closed, live, steps, cases) -> dict:
    """For each case (name, params, ls, x, y): what the first step of the loop does to the
    parameters it carries, and whether it changes any other carried float array of a parameter's
    shape (the optimizer's moments). {"error": why} when the step cannot be run on its own. Run in
    the judge, on the rebuilt program, each ls a pair (float32 scale, int32 good_steps)."""
    loops = training_loops(live, steps)
    if len(loops) != 1:
        return {"error": "no single loop of the training steps"}
    step = first_step_function(live, closed.consts, loops[0][0])
    shapes = {tuple(np.shape(v)) for v in cases[0][1].values()}
    out = {}
    for name, params, ls, x, y in cases:
        result = step(*jax.tree.leaves((params, ls, x, y)))
        if result is None:
            return {"error": "the loop is nested where its steps cannot be run one by one"}
        # a PRNG key the loop carries is read as its key data (no parameter's, never a float)
        carry_in, carry_out = ([program_data.as_numbers(v) for v in part] for part in result)
        slots = param_slots(carry_in, params)
        if len(slots) != len(KEYS):
            return {"error": f"the loop's carry does not hold the parameters {sorted(set(KEYS) - set(slots))} as "
                             "they are passed in (float32 arrays of their shapes)"}
        others = [i for i, v in enumerate(carry_in) if i not in slots.values() and tuple(v.shape) in shapes
                  and np.issubdtype(v.dtype, np.floating)]
        out[name] = {"params_in": {k: carry_in[i].astype(np.float64) for k, i in slots.items()},
                     "params_out": {k: carry_out[i].astype(np.float64) for k, i in slots.items()},
                     "others_changed": [not np.array_equal(carry_in[i], carry_out[i], equal_nan=True) for i in others]}
    return {"cases": out}


@probe
def train(sol, params, x, y, scale, lr, steps):
    """train_fp16_dynamic(params, x, y, DynScale(scale, 0), steps, optax.adam(lr)) traced, as data
    for the judge, which runs it (`runs`), reads it (`program_summary`) and runs its first step on
    its own (`first_steps`); with the layout of what it returns (`layout`: its containers, the
    results of the program at their leaves). {"error": why} when it cannot be traced."""
    params, x, y = arrays((params, x, y))
    try:
        closed, shape = train_program(sol, params, x, y, state(sol, scale, 0), steps, optax.adam(lr), True)
    except CheckFailed as exc:  # not one traceable loop
        return {"error": str(exc)}
    if not isinstance(shape, tuple) or len(shape) != 5:
        fail(f"train_fp16_dynamic should return (params, ls, scales, finites, losses), got {type(shape).__name__}"
             f"{' of length ' + str(len(shape)) if isinstance(shape, tuple) else ''}.")
    return {"program": send(sol, closed), "layout": layout(shape)}


def layout(tree, count=None) -> object:
    """What a program returns, as plain data: its containers (tuple, list, dict, None, any other
    kind by its name) with, at each array, its index among the program's results."""
    count = count if count is not None else [0]
    if tree is None:
        return None
    if isinstance(tree, tuple):
        return {"tuple": [layout(t, count) for t in tree]}
    if isinstance(tree, list):
        return {"list": [layout(t, count) for t in tree]}
    if isinstance(tree, dict):
        return {"dict": [[str(k), layout(v, count)] for k, v in sorted(tree.items(), key=lambda kv: str(kv[0]))]}
    if isinstance(tree, jax.ShapeDtypeStruct):
        count[0] += 1
        return {"leaf": count[0] - 1}
    children, _ = jax.tree_util.tree_flatten(tree, is_leaf=lambda t: t is not tree)
    return {"node": type(tree).__name__, "children": [layout(c, count) for c in children]}


def rebuild(shape, outs: list, used=None):
    """The returned value from the program's results `outs` and its layout (the judge's side of
    `layout`): tuples, lists and dicts as they were, another kind as an object of its name."""
    if shape is None:
        return None
    if not (isinstance(shape, dict) and len(shape) in (1, 2)):
        raise ValueError("a malformed layout")
    if "leaf" in shape and isinstance(shape["leaf"], int) and 0 <= shape["leaf"] < len(outs):
        return outs[shape["leaf"]]
    if "tuple" in shape:
        return tuple(rebuild(s, outs) for s in shape["tuple"])
    if "list" in shape:
        return [rebuild(s, outs) for s in shape["list"]]
    if "dict" in shape:
        return {str(k): rebuild(v, outs) for k, v in shape["dict"]}
    if "node" in shape and isinstance(shape["node"], str):
        return type(shape["node"][:60] or "node", (), {})()
    raise ValueError("a malformed layout")


def judged(fn, *args) -> dict:
    """`reading` in the judge, on values it computed itself: {"ok": fn(*args)} or the verdict."""
    try:
        return {"ok": fn(*args)}
    except Exception as exc:
        return {"verdict": verdicts.classify(exc, None, Path("."), 0.0)}


def runs(closed, shape, starts, data, steps) -> dict:
    """{name: readings of the run} for each start (name, scale, good) of the rebuilt training
    program, run here on the data set (params, x, y) (one compile). Run in the judge."""
    params, x, y = data
    run = jax.jit(jax.extend.core.jaxpr_as_fun(closed))
    out = {}
    for name, scale, good in starts:
        outs = jax.device_get(run(*jax.tree.leaves((params, (np.float32(scale), np.int32(good)), x, y))))
        out[name] = run_readings(rebuild(shape, list(outs)), steps)
    return out


def run_readings(run, steps) -> dict:
    """What the checks read from one run, each a reading (WHAT: the check's description)."""
    return {"per_step": judged(per_step, run, WHAT, steps),
            "params": judged(lambda: params_of(run, WHAT) and None),
            "params_f64": judged(lambda: {k: np.asarray(run[0][k], np.float64) for k in KEYS}),
            "params_dtypes": judged(lambda: {k: str(jnp.asarray(v).dtype) for k, v in run[0].items()}),
            "ls": judged(scale_state, run[1], f"{WHAT}: the returned DynScale"),
            "ls_scale_dtype": judged(lambda: str(jnp.asarray(run[1][0]).dtype)),
            "scales_dtype": judged(lambda: str(jnp.asarray(run[2]).dtype))}
