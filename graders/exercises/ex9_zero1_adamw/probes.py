"""Probes for Exercise 9: the learner's decay mask, AdamW step, ZeRO-1 state and training step,
run on 1-D "data" meshes of the 8 CPU devices and described as plain data.

The checks (graders/exercises/ex9_zero1_adamw/checks.py) draw every input and compute every expected value;
these functions only run the learner's code on what they are given and say what it made: values,
where each block of each returned array lives (device by device), the collectives and per-device
FLOPs of the compiled step, and the psums written into its traced program.
"""

import functools
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from graders.kit import costs, hlo, jaxpr, verdicts
from graders.kit.probing import probe
from graders.kit.replies import sendable
from graders.kit.verdicts import fail

AXIS = "data"
STATE_KEYS = ("mu", "nu", "count")
HYPER = ("lr", "b1", "b2", "eps", "wd")
# What a probe sends in place of a value the wire cannot carry (the judge says what it was).
# Every primitive lax.psum (and pmean) binds in JAX 0.12: psum_invariant under shard_map's default
# check_vma=True (also the transpose of making a replicated input varying), psum without it.
PSUM = frozenset({"psum", "psum_invariant", "psum2"})

_cache: dict = {}  # training runs (several checks read one) and the learner's step functions


@functools.cache
def mesh(n: int):
    """A 1-D mesh of the first n devices, its axis named "data", with Explicit axes (0.12's default)."""
    return jax.make_mesh((int(n),), (AXIS,), devices=jax.devices()[:int(n)])


def spec_for(shape, axis):
    """P() for axis None, else the spec splitting that axis over "data"."""
    return P() if axis is None else P(*([None] * int(axis)), AXIS)


def placed(m, value, spec):
    """A host array put on the mesh as `spec` says. From NumPy, device_put only copies each
    device's block; from a JAX array on one device it would compile a program to move it."""
    return jax.device_put(np.asarray(value), NamedSharding(m, spec))


def placement(value) -> dict:
    """Where a returned array lives: one row per device holding a block, its id then the block's
    start and stop along every axis (sorted by device); the largest block's bytes; the spec to
    show the learner."""
    shards = getattr(value, "addressable_shards", None)
    shape = tuple(int(d) for d in getattr(value, "shape", ()))
    if not isinstance(value, jax.Array) or shards is None:
        return {"kind": type(value).__name__, "blocks": None, "bytes": None, "spec": None, "shape": shape}
    blocks = []
    for shard in shards:
        row = [int(shard.device.id)]
        for s, dim in zip(shard.index, shape):
            row += [0 if s.start is None else int(s.start), dim if s.stop is None else int(s.stop)]
        blocks.append(row)
    sharding = value.sharding
    spec = str(sharding.spec) if isinstance(sharding, NamedSharding) else type(sharding).__name__
    # One int array, not nested lists: a run sends hundreds of these, and arrays cross the wire fast.
    return {"kind": "array", "blocks": np.array(sorted(blocks), np.int64).reshape(len(blocks), 1 + 2 * len(shape)),
            "bytes": max(int(s.data.nbytes) for s in shards), "spec": spec, "shape": shape}


def as_tree(plain):
    """What the judge sent (NumPy arrays in dicts, lists and tuples) as JAX arrays."""
    return jax.tree.map(jnp.asarray, plain)


def leaves_with_paths(tree) -> list:
    return [(jax.tree_util.keystr(path), leaf) for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]]


def same_structure(a, b) -> bool:
    try:
        return jax.tree.structure(a) == jax.tree.structure(b)
    except Exception:  # a learner object jax.tree cannot read
        return False


# ---------------------------------------------------------------- decay_mask

def _bool_of(leaf):
    """A mask leaf as True/False if it is a bool (Python, NumPy, or a 0-d bool array), else None."""
    if isinstance(leaf, (bool, np.bool_)):
        return bool(leaf)
    if isinstance(leaf, (jax.Array, np.ndarray)) and leaf.shape == () and leaf.dtype == bool:
        try:
            return bool(leaf)
        except Exception:  # a tracer
            return None
    return None


@probe
def decay_mask(sol, tree):
    """decay_mask(tree) on the given tree (its leaves as JAX arrays): whether the result has the
    tree's structure, the result's structure, and each leaf (path, bool or None, its type)."""
    params = as_tree(tree)
    mask = sol.decay_mask(params)
    rows = None
    if same_structure(mask, params):
        rows = [{"path": path, "value": _bool_of(leaf), "kind": type(leaf).__name__}
                for path, leaf in leaves_with_paths(mask)]
    return {"same_structure": rows is not None, "structure": _structure_text(mask), "leaves": rows}


def _structure_text(tree) -> str:
    try:
        return str(jax.tree.structure(tree))[:400]
    except Exception:  # not a pytree JAX can read
        return type(tree).__name__


# ---------------------------------------------------------------- adamw_step

def _state_of(out, what: str):
    if not isinstance(out, tuple) or len(out) != 2:
        got = type(out).__name__ + (f" of length {len(out)}" if isinstance(out, tuple) else "")
        fail(f"{what} should return (params, state), got {got}.")
    params, state = out
    if not isinstance(state, dict) or set(state) != set(STATE_KEYS):
        keys = sorted(state) if isinstance(state, dict) else type(state).__name__
        fail(f"{what}'s state should be a dict with keys 'mu', 'nu' and 'count', got {keys}.")
    return params, state


def _values(params, state) -> dict:
    return {"params": jax.tree.map(sendable, params),
            "mu": jax.tree.map(sendable, state["mu"]), "nu": jax.tree.map(sendable, state["nu"]),
            "count": sendable(state["count"]),
            "structure_ok": all(same_structure(t, params) for t in (state["mu"], state["nu"]))}


@probe
def adamw_run(sol, params, grads_list, state, hyper, mask):
    """adamw_step, jitted with the hyper-parameters and the mask fixed, run once per gradient of
    grads_list, each step from the params and state the previous one returned: the values after
    every step."""
    hp = [float(hyper[k]) for k in HYPER]
    key = ("adamw", sol, tuple(hp), repr(mask))
    if key not in _cache:  # one jitted function per hyper-parameters and mask: one compile per shape
        def one(p, g, s):
            return sol.adamw_step(p, g, s, *hp, mask)

        _cache[key] = jax.jit(one)
    step = _cache[key]
    params = as_tree(params)
    state = {"mu": as_tree(state["mu"]), "nu": as_tree(state["nu"]), "count": jnp.asarray(state["count"], jnp.int32)}
    runs = []
    for grads in grads_list:
        params, state = _state_of(step(params, as_tree(grads), state), "adamw_step")
        if not same_structure(params, grads):
            fail(f"adamw_step should return params with the structure of the params passed in, got "
                 f"{_structure_text(params)}.")
        runs.append(_values(params, state))
    return runs


# ---------------------------------------------------------------- init_zero1_state

@probe
def init_state(sol, n, params):
    """init_zero1_state(params placed replicated, mesh of n devices): the keys it returned, and
    for mu, nu and count, their values and where each block lives."""
    m = mesh(n)
    with jax.set_mesh(m):
        whole = jax.tree.map(lambda v: placed(m, np.asarray(v, np.float32), P()), params)
        state = sol.init_zero1_state(whole, m)
    if not isinstance(state, dict):
        fail(f"init_zero1_state should return a dict with keys 'mu', 'nu' and 'count', got {type(state).__name__}.")
    found = {"keys": sorted(str(k) for k in state)}
    if set(state) != set(STATE_KEYS):
        return found
    for key in ("mu", "nu"):
        if not same_structure(state[key], whole):
            found[key] = {"structure": _structure_text(state[key])}
            continue
        found[key] = {"leaves": [{"path": path, "value": sendable(leaf), "placed": placement(leaf),
                                  "dtype": str(getattr(leaf, "dtype", type(leaf).__name__))}
                                 for path, leaf in leaves_with_paths(state[key])]}
    count = state["count"]
    found["count"] = {"value": sendable(count), "placed": placement(count),
                      "dtype": str(getattr(count, "dtype", type(count).__name__))}
    return found


# ---------------------------------------------------------------- the training step

def learner_step(sol, n: int, hyper: dict):
    key = ("step", sol, int(n), tuple(sorted(hyper.items())))
    if key not in _cache:
        step = sol.make_zero1_step(mesh(n), **{k: float(hyper[k]) for k in HYPER})
        if not callable(step):
            fail(f"make_zero1_step(mesh, ...) should return a function step(params, state, x, y), "
                 f"got {type(step).__name__}.")
        _cache[key] = step
    return _cache[key]


def grader_state(m, params, splits):
    """The grader's own ZeRO-1 placement: zeros split along the axis the judge gives per leaf."""
    leaves, treedef = jax.tree.flatten(params)

    def zeros():
        return treedef.unflatten([placed(m, np.zeros(np.shape(p), np.float32), spec_for(np.shape(p), a))
                                  for p, a in zip(leaves, splits)])

    return {"mu": zeros(), "nu": zeros(), "count": placed(m, np.int32(0), P())}


def psums(program) -> list[dict]:
    """Every psum equation of a traced program, through every nesting: its axes and the shapes
    of what it sums (each device's own operands)."""
    rows = []
    for eqn in jaxpr.walk(program):
        if eqn.primitive.name in PSUM:
            axes = eqn.params.get("axes", ())
            rows.append({"said": jaxpr.said("psum"),  # every one of them is written lax.psum (or lax.pmean)
                         "axes": [str(a) for a in (axes if isinstance(axes, (tuple, list)) else (axes,))],
                         "shapes": [tuple(int(d) for d in getattr(v.aval, "shape", ())) for v in eqn.invars]})
    return rows


def _describe_step(out, what: str):
    if not isinstance(out, tuple) or len(out) != 3:
        got = type(out).__name__ + (f" of length {len(out)}" if isinstance(out, tuple) else "")
        fail(f"{what} should return (params, state, loss), got {got}.")
    params, state, loss = out
    if not isinstance(state, dict) or set(state) != set(STATE_KEYS):
        keys = sorted(state) if isinstance(state, dict) else type(state).__name__
        fail(f"{what}'s state should be a dict with keys 'mu', 'nu' and 'count', got {keys}.")
    return params, state, loss


def _layout(params, state, reference) -> dict:
    """Where every leaf of the returned params and moments lives (None where the structure is not
    the params'), and the count's placement."""
    rows = {}
    for key, tree in (("params", params), ("mu", state["mu"]), ("nu", state["nu"])):
        rows[key] = ([{"path": path, "placed": placement(leaf)} for path, leaf in leaves_with_paths(tree)]
                     if same_structure(tree, reference) else None)
    rows["count"] = placement(state["count"])
    return rows


def _verdict(sol, exc) -> list:
    """[outcome, message] for what the learner's code raised, as the worker would classify it."""
    return list(verdicts.classify(exc, sol, Path(sol.__file__).resolve().parent, 0.0))


def _prepare(sol, n, params, x, y, hyper, splits, compiled: bool) -> dict:
    """The grader's placement on n devices, the learner's step, and (for a jitted step) its traced
    and lowered program: everything but the compile, which _compile runs in a thread. Runs the
    learner's code (tracing), so in the calling thread."""
    m = mesh(n)
    step = learner_step(sol, n, hyper)
    with jax.set_mesh(m):
        p = jax.tree.map(lambda v: placed(m, np.asarray(v, np.float32), P()), params)
        s = grader_state(m, params, splits)
        xs, ys = placed(m, x, P(AXIS, None)), placed(m, y, P(AXIS, None))
        job = {"n": int(n), "mesh": m, "step": step, "args": (p, s, xs, ys), "compiled": compiled}
        if hasattr(step, "trace"):
            traced = step.trace(p, s, xs, ys)
            job["psums"] = psums(traced.jaxpr.jaxpr)
            job["lowered"] = traced.lower()
    return job


def _compile(job) -> None:
    """Compile a lowered step (in a thread of its own: XLA's compiler runs outside the GIL, and no
    learner code runs here, their code ran while tracing)."""
    try:
        job["executable"] = job["lowered"].compile()
    except Exception as exc:  # an error of the learner's program, said where it is run
        job["compile_error"] = exc


def _run(sol, job, steps: int) -> dict:
    """`steps` steps from the grader's placement, with the compiled executable while the inputs
    keep its layout: the losses, where params and moments live after each step, the final params
    and moments."""
    step, found = job["step"], {"losses": [], "layouts": []}
    if "compile_error" in job:
        raise job["compile_error"]
    executable = job.get("executable")
    if job["compiled"]:
        if executable is None:
            # Not wrapped here: jax.jit around a function that calls jitted functions changes what
            # they return (an inner jit's out_shardings are not kept), so it would not be theirs.
            found["not_jitted"] = type(step).__name__
        else:
            text = executable.as_text()
            found["collectives"] = hlo.collective_counts(text)
            found["collective_shapes"] = [[op, list(shape)] for op, shape in hlo.collective_shapes(text)]
            found["flops"] = costs.flops(executable)
            found["psums"] = job["psums"]

    def run(*args):
        if executable is None:
            return step(*args)
        try:
            return executable(*args)
        except ValueError:  # e.g. params that came back split no longer match its layout
            return step(*args)

    p, s, xs, ys = job["args"]
    reference = p
    with jax.set_mesh(job["mesh"]):
        for i in range(int(steps)):
            try:
                p, s, loss = _describe_step(run(p, s, xs, ys), "step")
            except Exception as exc:  # e.g. params left split that the next forward pass cannot take
                if i == 0:
                    raise
                # What the steps so far returned is kept for the checks of the layout; the checks
                # of the numbers fail with what this step raised.
                found["stopped"] = {"step": i + 1, "verdict": _verdict(sol, exc)}
                break
            found["losses"].append(sendable(loss))
            found["layouts"].append(_layout(p, s, reference))
    whole = same_structure(p, reference)
    found["params"] = jax.tree.map(sendable, p) if whole else None
    found["params_structure"] = _structure_text(p)
    for key in ("mu", "nu"):  # the final moments, gathered to the host
        found[key] = jax.tree.map(sendable, s[key]) if same_structure(s[key], reference) else None
    return found


def _train_key(sol, runs, hyper, steps, compiled_n) -> tuple:
    return ("train", sol, tuple(sorted(hyper.items())), int(steps), int(compiled_n),
            *(np.asarray(a).tobytes() for a in jax.tree.leaves(runs)), *(tuple(r[4]) for r in runs))


@probe
def start_steps(sol, runs, hyper, steps, compiled_n):
    """Trace the learner's step on every mesh of `runs` now and start compiling each in a thread
    (XLA's compiler runs outside the GIL; no learner code runs there), so that the checks that
    come first run while it compiles; `train` takes the programs from here. What tracing raised
    is kept for `train` to report. Returns nothing."""
    key = _train_key(sol, runs, hyper, steps, compiled_n)
    if key in _cache or ("started", key) in _cache:
        return None
    pool = ThreadPoolExecutor(max_workers=max(1, min(len(runs), os.cpu_count() or 1)))
    jobs, errors = [], {}
    for size, params, x, y, splits in runs:
        try:
            job = _prepare(sol, size, params, x, y, hyper, splits, int(size) == int(compiled_n))
        except Exception as exc:  # the learner's code, tracing on this mesh: this mesh's checks say it
            errors[int(size)] = {"error": _verdict(sol, exc)}
            continue
        jobs.append(job)
        if "lowered" in job:
            job["future"] = pool.submit(_compile, job)
    pool.shutdown(wait=False)
    _cache[("started", key)] = jobs, errors
    return None


@probe
def train(sol, runs, hyper, steps, compiled_n, n):
    """The learner's ZeRO-1 step on each mesh of `runs` ([n, params, x, y, splits] each), from
    the grader's placement (params replicated, the moments split as `splits` says, x and y split
    by rows), `steps` steps: for mesh n, every loss, where params and moments live after every
    step and the final params, or {"error": verdict} for what the learner's code raised there. On
    compiled_n devices also what the compiled step holds: its collectives, per-device FLOPs and
    the psums of its traced program. The programs come from start_steps (traced, then compiled
    in threads), or are made here the same way. Cached: every check of the step reads this one
    run; each gets mesh n's part."""
    key = _train_key(sol, runs, hyper, steps, compiled_n)
    if key not in _cache:
        if ("started", key) not in _cache:
            start_steps(sol, runs, hyper, steps, compiled_n)
        jobs, found = _cache.pop(("started", key))
        found = dict(found)
        for job in jobs:
            if "future" in job:
                job["future"].result()
            try:
                found[job["n"]] = _run(sol, job, steps)
            except Exception as exc:
                found[job["n"]] = {"error": _verdict(sol, exc)}
        _cache[key] = {str(size): value for size, value in found.items()}
    return _cache[key][str(n)]
