"""Probes for Exercise 1: the learner's two functions run on the judge's batches, and their
program sent to the judge, which reads it.

`traced_program` traces accum_token_weighted and sends its program as data (graders/kit/program.py).
The judge rebuilds it and calls `scan_at_work` here on it (never on the learner's code): the
program with its jit calls inlined and its dead code removed (graders.kit.jaxpr.flatten), the batch
followed through it, and the program evaluated once with the scans fed a different batch than the
rest of it. What it finds (shapes, scan lengths, numbers read per step, what touches the batch
outside the scans, the three results) the check decides about.
"""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from graders.kit import jaxpr, program as program_data
from graders.kit.numeric import as_array
from graders.kit.probing import probe

# Primitives that only move the batch's numbers around (reshaping, slicing, indexing, joining,
# casting): the batch may pass through these on its way into the scan, and nothing else outside it.
MOVES = frozenset({"reshape", "squeeze", "expand_dims", "broadcast_in_dim", "transpose", "convert_element_type",
                   "copy", "copy_p", "slice", "split", "concatenate", "stack", "dynamic_slice", "gather"})
DATA_NAMES = ("x", "y", "m")


def as_f32(*arrays):
    return [jnp.asarray(a, jnp.float32) for a in arrays]


@probe
def tok_loss_sum_count(sol, w, x, y, m, index, what, require_pair=False):
    """Item `index` of tok_loss_sum_count(w, x, y, m) as a float64 array, with what came back:
    {"type": its type's name, "pair": whether it is a tuple or list of two, "value": the item}.
    With require_pair, an answer that is no pair is not indexed ("value" is None)."""
    got = sol.tok_loss_sum_count(*as_f32(w, x, y, m))
    pair = isinstance(got, (tuple, list)) and len(got) == 2
    value = as_array(got[index], what) if pair or not require_pair else None
    return {"type": type(got).__name__, "pair": pair, "value": value}


@probe
def accum_token_weighted(sol, w, x, y, m, n_micro, what, shape, jit=False):
    """accum_token_weighted(w, x, y, m, n_micro=n_micro) as a float64 array (called through
    jax.jit with n_micro fixed when jit is true)."""
    call = partial(sol.accum_token_weighted, n_micro=n_micro)
    if jit:
        call = jax.jit(call)
    return as_array(call(*as_f32(w, x, y, m)), what, tuple(shape))


# ---- reading the program: does the scan do the work? -----------------------------------------

def _size(v) -> int:
    return int(np.prod(v.aval.shape, dtype=int))


def follow_the_batch(program, n_micro: int, filename: str = ""):
    """Walk the top level of the program from x, y and m (invars 1..3).

    Returns (scans, per_step, outside, whole): the scans of length n_micro that receive the
    batch; how many numbers of each of x, y, m one step of them reads (through any slice, index
    or gather, in any nesting: jaxpr.numbers_read); a description of every equation outside them
    that does arithmetic on the batch; and of every part of the batch a step of them reads whole."""
    origin = {v: {k} for k, v in enumerate(program.invars[1:4])}  # value -> which of x, y, m it holds
    scans, outside, whole = [], [], []
    per_step = [0, 0, 0]

    def held(v):
        return f"{'/'.join(DATA_NAMES[k] for k in sorted(origin[v]))} {tuple(v.aval.shape)}"

    def where(eqn, v):
        line = jaxpr.written_at(eqn, filename)
        return f"{jaxpr.said(eqn.primitive.name)} on the whole {held(v)}{f' at {line}' if line else ''}"

    for eqn in program.eqns:
        batch_in = [(i, v) for i, v in enumerate(eqn.invars) if not isinstance(v, jax.extend.core.Literal) and v in origin]
        if not batch_in:
            continue
        name = eqn.primitive.name
        if name == "scan" and eqn.params["length"] == n_micro:
            scans.append(eqn)
            _, carry, xs = jaxpr.scan_operands(eqn)
            body = eqn.params["jaxpr"]
            for i, v in batch_in:
                # xs: one slice per step; a constant or the carry: what the body takes of it
                read = (_size(v) // n_micro if i in xs else
                        _size(v) if i in carry else jaxpr.numbers_read(body, i))
                for k in origin[v]:
                    per_step[k] += read
                if read > _size(v) // n_micro:
                    whole.append(f"every step {'gets the whole' if read >= _size(v) else f'reads {read} numbers of'} "
                                 f"{held(v)}")
        elif name in MOVES and not (name == "broadcast_in_dim" and _size(eqn.outvars[0]) > _size(batch_in[0][1])):
            for out in eqn.outvars:
                origin[out] = set().union(*(origin[v] for _, v in batch_in))
        else:
            outside.extend(where(eqn, v) for _, v in batch_in[:1])
    outside.extend(f"returning {DATA_NAMES[min(origin[v])]}" for v in program.outvars
                   if not isinstance(v, jax.extend.core.Literal) and v in origin)
    return scans, per_step, outside, whole


def evaluate_feeding_the_scan(program, consts, scans, world_a, world_b):
    """The program's result on world_a, on world_b, and on world_a with only the given scans fed
    world_b's values instead. If the scans compute the result, the last equals the second."""
    envs = {"a": {}, "b": {}, "mixed": {}}
    for env, world in ((envs["a"], world_a), (envs["b"], world_b), (envs["mixed"], world_a)):
        env.update(zip(program.constvars, consts))
        env.update(zip(program.invars, world))

    def read(env, v):
        return v.val if isinstance(v, jax.extend.core.Literal) else env[v]

    for eqn in program.eqns:
        params = eqn.primitive.get_bind_params(eqn.params)
        for name, env in envs.items():
            source = envs["b"] if name == "mixed" and eqn in scans else env
            outs = eqn.primitive.bind(*(read(source, v) for v in eqn.invars), **params)
            env.update(zip(eqn.outvars, outs if eqn.primitive.multiple_results else [outs]))
    return [read(envs[name], program.outvars[0]) for name in ("a", "b", "mixed")]


@probe
def traced_program(sol, world, n_micro):
    """accum_token_weighted(*world, n_micro=n_micro)'s program as data, for the judge to read and
    run (custom_jvp/custom_vjp functions as their primal: it is only run forwards)."""
    fn = partial(sol.accum_token_weighted, n_micro=n_micro)
    closed = jax.make_jaxpr(fn)(*as_f32(*world))
    return program_data.encode_or_reason(closed, getattr(sol, "__file__", ""), forward=True)


def scan_at_work(closed, world_a, world_b, n_micro):
    """What the program `closed` (accum_token_weighted(*world_a, n_micro=n_micro)'s, rebuilt by
    the judge from what the worker sent) does with the batch. Run in the judge.

    Always: "shapes", the shapes of what it returns. If that is one array of w's shape, also
    "scan_lengths" (every scan traced), "live_lengths" (the scans left after dead-code removal),
    "while_loops" (live while loops at the top level),
    "scans" (how many scans of length n_micro receive the batch), "per_step" (numbers of x, y, m
    one step of them reads), "outside" (what touches the batch outside them), "whole" (what a step
    of them reads more of than one micro-batch) and "handed_back" (numbers of their results the
    returned value is computed from). If there are such scans, also "on_a", "on_b" and "fed_b": the result
    on world_a, on world_b, and on world_a with only those scans fed world_b."""
    world_a, world_b = as_f32(*world_a), as_f32(*world_b)
    shapes = [tuple(int(n) for n in getattr(v.aval, "shape", ())) for v in closed.outvars]
    found = {"shapes": shapes}
    if [tuple(v.aval.shape) for v in closed.invars] != [tuple(a.shape) for a in world_a]:
        found["inputs"] = [tuple(int(n) for n in v.aval.shape) for v in closed.invars]
        return found
    if shapes != [tuple(world_a[0].shape)]:
        return found
    fn = jax.extend.core.jaxpr_as_fun(closed)
    traced = closed
    # Only run forwards here: a checkpoint or custom_vjp around the work changes nothing it computes.
    program, consts = jaxpr.flatten(lambda *a: fn(*a), *world_a, through=jaxpr.EVERY_CALL)
    scans, per_step, outside, whole = follow_the_batch(program, n_micro)
    found.update(
        scan_lengths=[int(n) for n in jaxpr.scan_lengths(traced)],
        live_lengths=[int(e.params["length"]) for e in jaxpr.walk(program) if jaxpr.is_a(e, "scan")],
        while_loops=sum(e.primitive.name == "while" for e in program.eqns),
        scans=len(scans), per_step=per_step, outside=outside, whole=whole,
        # what the scans hand back that the result is computed from: dead outputs are gone
        handed_back=sum(_size(v) for e in scans for v in e.outvars))
    if scans:
        # One compiled program for the three runs: the learner's program is new at every edit.
        runs = jax.jit(partial(evaluate_feeding_the_scan, program, consts, scans))(world_a, world_b)
        found.update(zip(("on_a", "on_b", "fed_b"), (np.asarray(r, np.float64) for r in runs)))
    return found


# Other data for every key the program makes or holds (program.keys_changed): three, since one
# change can miss a rare draw (dropout at rate 0.01 drops none of the technique batches' valid
# tokens for about one key in three).
KEY_CHANGES = (0x9E3779B9, 0x7F4A7C15, 0x3C6EF372)


def runs_with_keys_changed(closed, worlds):
    """The program `closed` run by the judge on each world with every PRNG key it makes or holds
    changed (program.keys_changed), once per KEY_CHANGES: [[result per world] per change]; [] for a
    program that draws no random numbers; a ProgramError where it cannot be so run. Run in the judge."""
    if not program_data.draws_random_numbers(closed):
        return []
    runs = []
    for change in KEY_CHANGES:
        run = jax.jit(jax.extend.core.jaxpr_as_fun(program_data.keys_changed(closed, change)))
        try:
            runs.append([np.asarray(run(*as_f32(*world))[0], np.float64) for world in worlds])
        except Exception as exc:  # noqa: BLE001 (JAX's own refusal of the changed program)
            raise program_data.ProgramError(f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}") from None
    return runs
