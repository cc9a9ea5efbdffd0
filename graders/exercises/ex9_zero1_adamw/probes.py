"""Probes for Exercise 9: the learner's decay mask and AdamW step, run on what the checks send and
described as plain data (values), and the learner's ZeRO-1 state and training step, traced on 1-D
"data" meshes of the 8 CPU devices and sent as programs (graders/kit/program.py, issue 31).

The checks (graders/exercises/ex9_zero1_adamw/checks.py) draw every input and compute every expected value;
they rebuild the programs sent here, run them on their own inputs, and read where each value they
computed lives, and what the step compiles to (collectives, per-device FLOPs, the psums written into
its program), themselves. The helpers below that place arrays and describe a placement are pure
(no learner code): the judge uses them on its own arrays.
"""

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from graders.kit import jaxpr, program, verdicts
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


# ---------------------------------------------------------------- the programs (issue 31)

# Without --sandbox the probes run in the judge's own process (graders/child/probe_channel.py's
# Local), where sending a program through the wire and rebuilding it would only cost the learner's
# edit loop time. The judge puts a nonce of its own here before its first probe call
# (checks.nonce); a probe that finds it files each program it sent, its encoding and the traced
# program itself (IN_PROCESS[(nonce, kind, n)]), and replies HANDED in its place; the judge takes
# them back only from its own process's dict. Under --sandbox nothing the worker does reaches that
# dict, and the judge decodes what the worker sent. Either way the program is encoded first, so
# what cannot be sent is refused alike.
IN_PROCESS: dict = {}
HANDED = {"in_process": 1}


def _encoded(closed, sol, kind: str, n: int) -> dict:
    message = program.encode_or_reason(closed, getattr(sol, "__file__", ""), forward=True, meshes=True)
    judge = IN_PROCESS.get("judge")
    if judge is None or "program" not in message:
        return message
    IN_PROCESS[(judge, kind, int(n))] = (message, closed)
    return dict(HANDED)


def replicated(m, params):
    """The params (NumPy arrays in dicts) as float32 arrays replicated on mesh m."""
    return jax.tree.map(lambda v: placed(m, np.asarray(v, np.float32), P()), params)


@probe
def init_program(sol, n, params):
    """init_zero1_state(params placed replicated, mesh of n devices), traced: the keys and
    structure it returns, and its program (the judge runs it and reads where each value lives)."""
    m = mesh(n)
    with jax.set_mesh(m):
        whole = replicated(m, params)

    def init(p):
        # Traced as it is called: zeros made with device=NamedSharding(...) are placed in the
        # program as the eager call places them (program.full_placed_as_called).
        with program.full_placed_as_called():
            return sol.init_zero1_state(p, m)

    try:
        with jax.set_mesh(m):
            closed, out = jax.make_jaxpr(init, return_shape=True)(whole)
    except Exception:
        try:
            # Again with the no-ops JAX refuses in a trace skipped (program.no_ops_traced):
            # jax.set_mesh(mesh) inside init_zero1_state, with the mesh it is called under.
            with jax.set_mesh(m), program.no_ops_traced(m):
                closed, out = jax.make_jaxpr(init, return_shape=True)(whole)
        except Exception:
            # What the learner's code raises when called as the exercise calls it (eagerly, under
            # the mesh) is said first; only code that runs there but cannot be traced is told so.
            with jax.set_mesh(m):
                sol.init_zero1_state(whole, m)
            raise
    if not isinstance(out, dict):
        fail(f"init_zero1_state should return a dict with keys 'mu', 'nu' and 'count', got {type(out).__name__}.")
    found = {"keys": sorted(str(k) for k in out)}
    if set(out) != set(STATE_KEYS):
        return found
    for key in ("mu", "nu"):
        if not same_structure(out[key], whole):
            found[key] = {"structure": _structure_text(out[key])}
    if not jax.tree_util.all_leaves([out["count"]]):
        found["count"] = {"structure": _structure_text(out["count"])}
    found["program"] = _encoded(closed, sol, "init", n)
    return found


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


def step_inputs(m, params, x, y, splits) -> tuple:
    """The grader's placement on m: params replicated, the moments split as `splits` says, x and
    y split by rows."""
    return (replicated(m, params), grader_state(m, params, splits), placed(m, x, P(AXIS, None)),
            placed(m, y, P(AXIS, None)))


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


def _structure_of_step(out, reference) -> str | None:
    """What is wrong with the structure a step returns (the words the checks say), or None."""
    if not isinstance(out, tuple) or len(out) != 3:
        got = type(out).__name__ + (f" of length {len(out)}" if isinstance(out, tuple) else "")
        return f"step should return (params, state, loss), got {got}."
    params, state, loss = out
    if not isinstance(state, dict) or set(state) != set(STATE_KEYS):
        keys = sorted(state) if isinstance(state, dict) else type(state).__name__
        return f"step's state should be a dict with keys 'mu', 'nu' and 'count', got {keys}."
    if not same_structure(params, reference):
        return ("step should return params with the structure of the params passed in, got "
                f"{_structure_text(params)}.")
    for key in ("mu", "nu"):
        if not same_structure(state[key], reference):
            return f"the step's state['{key}'] should have the structure of params."
    if not (jax.tree_util.all_leaves([state["count"]]) and jax.tree_util.all_leaves([loss])):
        return "step should return (params, state, loss) with an array for the count and for the loss."
    return None


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


@probe
def step_programs(sol, runs, hyper):
    """make_zero1_step(mesh, **hyper)'s step traced on every mesh of `runs` ([n, params, x, y,
    splits] each) at the grader's placement (params replicated, the moments split as `splits`
    says, x and y split by rows): per mesh, its program as data (the judge runs it for every step
    and compiles it), or {"structure": words} for what it returns wrongly, or {"error": verdict}
    for what the learner's code raised there."""
    found = {}
    for size, params, x, y, splits in runs:
        m = mesh(size)
        try:
            step = learner_step(sol, size, hyper)
            with jax.set_mesh(m):
                args = step_inputs(m, params, x, y, splits)
                # A step compiled ahead of time is read as the jit it was compiled from, as a
                # training loop calls it (at the top level only: inside its own jit it is refused).
                with program.compiled_calls_traced() as compiled:
                    closed, out = jax.make_jaxpr(compiled.top(step), return_shape=True)(*args)
        except Exception as exc:  # the learner's code, tracing on this mesh: this mesh's checks say it
            found[str(size)] = {"error": _verdict(sol, exc)}
            continue
        wrong = _structure_of_step(out, args[0])
        found[str(size)] = {"structure": wrong} if wrong else {"program": _encoded(closed, sol, "step", size)}
    return found
