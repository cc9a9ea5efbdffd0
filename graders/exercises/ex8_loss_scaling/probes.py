"""Probes for Exercise 8: the learner's scale rule, all_finite, scaled_grads and training loop,
run, traced and read into plain data (numbers, float64 arrays, dtype names, summaries of the
traced programs). The checks (graders/exercises/ex8_loss_scaling/checks.py) compute every expected value.

What the learner returns is read here, where its objects are: a result of the wrong structure
fails with the grader's message (it names the type that came back). Readings that a check makes
only later (e.g. the final DynScale of a training run) are `reading`s: the value, or the verdict
reading it would have given, with WHAT standing for the check's own words, so that each check
fails where and as it always did.
"""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from graders.kit import jaxpr, verdicts
from graders.kit.verdicts import CheckFailed, fail, where
from graders.kit.numeric import as_array
from graders.kit.probing import probe

KEYS = ("w1", "b1", "w2", "b2")
WHAT = "\x00what\x00"  # in a reading's message: the check's own description of the call

_jitted: dict = {}  # (id(sol), name) -> (sol, jax.jit(sol.name)): one compile for every call


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
def all_finite(sol, tree, jit, what):
    """all_finite(tree) (under jax.jit when `jit`), as a bool."""
    fn = jitted(sol, "all_finite") if jit else sol.all_finite
    return as_flag(traced(sol, fn, arrays(tree)), what)


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
    """The operand dtypes of every dot_general of the live traced scaled_grads (a decoy computed
    and discarded is not in it), or {"error": why it cannot be traced}."""
    params, x, y = arrays((params, x, y))
    try:
        program = jaxpr.live(jaxpr.trace(lambda q, s: traced(sol, sol.scaled_grads, q, x, y, s),
                                         params, jnp.float32(scale)))
    except CheckFailed as exc:
        return {"error": str(exc)}
    return {"dots": [[str(v.aval.dtype) for v in e.invars] for e in jaxpr.find(program, "dot")]}


# ---------------------------------------------------------------- train_fp16_dynamic

def loop_scans(program, steps):
    return [(e, outer) for e, outer in jaxpr.walk_nested(program) if jaxpr.is_a(e, "scan") and e.params["length"] == steps]


def run_readings(sol, run, steps) -> dict:
    """What the checks read from one run, each a reading (WHAT: the check's description)."""
    return {"per_step": reading(sol, per_step, run, WHAT, steps),
            "params": reading(sol, lambda: params_of(run, WHAT) and None),
            "params_f64": reading(sol, lambda: {k: np.asarray(run[0][k], np.float64) for k in KEYS}),
            "params_dtypes": reading(sol, lambda: {k: str(jnp.asarray(v).dtype) for k, v in run[0].items()}),
            "ls": reading(sol, scale_state, run[1], f"{WHAT}: the returned DynScale"),
            "ls_scale_dtype": reading(sol, lambda: str(jnp.asarray(run[1][0]).dtype))}


def program_summary(sol, program, steps: int) -> dict:
    """What the checks read from the traced loop: its scans of length `steps`, its size, whether
    the first such scan is inside a jit, and a reading of its live part (live_summary)."""
    scans = loop_scans(program, steps)
    return {"scans": len(scans), "scan_lengths": jaxpr.scan_lengths(program),
            "equations": sum(1 for _ in jaxpr.walk(program)),
            "in_jit": bool(scans) and any(jaxpr.is_a(e, "jit") for e in scans[0][1]),
            "live": reading(sol, live_summary, program, steps)}


def live_summary(program, steps: int) -> dict:
    """In the live program (what reaches the results): how many scans of length `steps`, the
    operand dtypes of every dot_general, how many dots the first such scan holds, and for each of
    its carried outputs (shape, floating, depends on that step's is_finite)."""
    live = jaxpr.live(program)
    scans = loop_scans(live, steps)
    out = {"scans": len(scans), "dots": [[str(v.aval.dtype) for v in e.invars] for e in jaxpr.find(live, "dot")],
           "dots_in_scan": 0, "carry": []}
    if scans:
        scan = scans[0][0]
        out["dots_in_scan"] = sum(1 for e in jaxpr.inside(scan) if jaxpr.is_a(e, "dot"))
        body = scan.params["jaxpr"].jaxpr
        n_carry = jaxpr.scan_carry_count(scan)
        depends = jaxpr.depends_on(body, lambda e: e.primitive.name == "is_finite")[:n_carry]
        out["carry"] = [(tuple(v.aval.shape), bool(jnp.issubdtype(v.aval.dtype, jnp.floating)), bool(depends[i]))
                        for i, v in enumerate(body.outvars[:n_carry])]
    return out


@probe
def train(sol, params, x, y, starts, steps, lr, trace_steps):
    """train_fp16_dynamic(params, x, y, DynScale(s0, 0), steps, optax.adam(lr)) for each (name, s0)
    of `starts` (one compile: one tx), read; then the loop traced for each n of trace_steps from
    the first start, summarised (sizes for every n, the rest for n == steps), or the message
    saying why it cannot be traced."""
    params, x, y = arrays((params, x, y))
    tx = optax.adam(lr)
    runs = {}
    for name, s0 in starts:
        result = traced(sol, sol.train_fp16_dynamic, params, x, y, state(sol, s0, 0), steps, tx)
        if not isinstance(result, tuple) or len(result) != 5:
            fail(f"train_fp16_dynamic should return (params, ls, scales, finites, losses), got {type(result).__name__}"
                 f"{' of length ' + str(len(result)) if isinstance(result, tuple) else ''}.")
        runs[name] = run_readings(sol, jax.device_get(result), steps)
    try:
        programs = {n: traced(sol, jaxpr.trace, lambda q, ls: sol.train_fp16_dynamic(q, x, y, ls, n, tx), params,
                              state(sol, starts[0][1], 0)) for n in trace_steps}
    except CheckFailed as exc:  # runs on concrete values, but cannot be traced: not one jitted scan
        return {"runs": runs, "programs": str(exc)}
    summaries = {n: (program_summary(sol, p, steps) if n == steps else {"equations": sum(1 for _ in jaxpr.walk(p))})
                 for n, p in programs.items()}
    return {"runs": runs, "programs": summaries}
