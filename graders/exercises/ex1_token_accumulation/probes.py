"""Probes for Exercise 1: the learner's two functions run on the judge's batches, and their
program read where it runs.

`scan_at_work` traces accum_token_weighted with its jit calls inlined and its dead code removed
(graders.kit.jaxpr.flatten), follows the batch through it, and evaluates it once with the scans fed a
different batch than the rest of the program. It hands back what it found (shapes, scan lengths,
numbers read per step, what touches the batch outside the scans, the three results); the check
decides what that means.
"""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from graders.kit import jaxpr
from graders.kit.numeric import as_array
from graders.kit.probing import probe

# Primitives that only move the batch's numbers around (reshaping, slicing, joining, casting):
# the batch may pass through these on its way into the scan, and nothing else outside the scan.
MOVES = frozenset({"reshape", "squeeze", "expand_dims", "broadcast_in_dim", "transpose", "convert_element_type",
                   "copy", "copy_p", "slice", "split", "concatenate", "stack", "dynamic_slice"})
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


def follow_the_batch(program, n_micro: int):
    """Walk the top level of the program from x, y and m (invars 1..3).

    Returns (scans, per_step, outside): the scans of length n_micro that receive the batch, how
    many numbers of each of x, y, m one step of them reads, and a description of every equation
    outside them that does arithmetic on the batch (or hands it whole to every step)."""
    origin = {v: {k} for k, v in enumerate(program.invars[1:4])}  # value -> which of x, y, m it holds
    scans, outside = [], []
    per_step = [0, 0, 0]

    def where(eqn, v):
        return f"{eqn.primitive.name} on {'/'.join(DATA_NAMES[k] for k in sorted(origin[v]))}{list(v.aval.shape)}"

    for eqn in program.eqns:
        batch_in = [(i, v) for i, v in enumerate(eqn.invars) if not isinstance(v, jax.extend.core.Literal) and v in origin]
        if not batch_in:
            continue
        name = eqn.primitive.name
        if name == "scan" and eqn.params["length"] == n_micro:
            scans.append(eqn)
            consts, _, xs = scan_operands(eqn)
            body = eqn.params["jaxpr"].jaxpr
            for i, v in batch_in:
                if i in xs:  # one slice per step
                    for k in origin[v]:
                        per_step[k] += _size(v) // n_micro
                elif i in consts and (sliced := _sliced_in_body(body, body.invars[i], _size(v), n_micro)) is not None:
                    for k in origin[v]:
                        per_step[k] += sliced
                else:
                    if i in consts:  # every step reads all of it
                        for k in origin[v]:
                            per_step[k] += _size(v)
                    outside.append(f"scan (every step gets the whole {where(eqn, v).split(' on ')[1]})")
        elif name in MOVES and not (name == "broadcast_in_dim" and _size(eqn.outvars[0]) > _size(batch_in[0][1])):
            for out in eqn.outvars:
                origin[out] = set().union(*(origin[v] for _, v in batch_in))
        else:
            outside.extend(where(eqn, v) for _, v in batch_in[:1])
    outside.extend(f"returning {DATA_NAMES[min(origin[v])]}" for v in program.outvars
                   if not isinstance(v, jax.extend.core.Literal) and v in origin)
    return scans, per_step, outside


def scan_operands(eqn) -> tuple[list[int], list[int], list[int]]:
    """Positions of a scan's operands that are its constants, its initial carry and its xs."""
    consts, carry, xs = eqn.params["ft_in"].update(list(range(len(eqn.invars)))).unpack()
    return list(consts), list(carry), list(xs)


def _sliced_in_body(body, var, size: int, n_micro: int):
    """Numbers of `var` one step reads when the scan gets the whole batch as a constant: only
    dynamic_slices of at most one micro-batch may read it (else None)."""
    total = 0
    for eqn in body.eqns:
        if var in eqn.invars:
            if eqn.primitive.name != "dynamic_slice" or eqn.invars[0] is not var:
                return None
            total += _size(eqn.outvars[0])
    return total if 0 < total <= size // n_micro else None


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
def scan_at_work(sol, world_a, world_b, n_micro):
    """What accum_token_weighted(*world_a, n_micro=n_micro)'s program does with the batch.

    Always: "shapes", the shapes of what it returns. If that is one array of w's shape, also
    "scan_lengths" (every scan traced), "live_lengths" (the scans left after dead-code removal),
    "scans" (how many scans of length n_micro receive the batch), "per_step" (numbers of x, y, m
    one step of them reads), "outside" (what touches the batch outside them) and "handed_back"
    (numbers they return). If there are such scans, also "on_a", "on_b" and "fed_b": the result
    on world_a, on world_b, and on world_a with only those scans fed world_b."""
    world_a, world_b = as_f32(*world_a), as_f32(*world_b)
    fn = partial(sol.accum_token_weighted, n_micro=n_micro)
    traced = jaxpr.trace(fn, *world_a)
    program, consts = jaxpr.flatten(fn, *world_a)
    shapes = [tuple(int(n) for n in getattr(v.aval, "shape", ())) for v in program.outvars]
    found = {"shapes": shapes}
    if shapes != [tuple(world_a[0].shape)]:
        return found
    scans, per_step, outside = follow_the_batch(program, n_micro)
    found.update(
        scan_lengths=[int(n) for n in jaxpr.scan_lengths(traced)],
        live_lengths=[int(e.params["length"]) for e in jaxpr.walk(program) if e.primitive.name == "scan"],
        scans=len(scans), per_step=per_step, outside=outside,
        handed_back=sum(_size(v) for e in scans for v in e.outvars))
    if scans:
        # One compiled program for the three runs: the learner's program is new at every edit.
        runs = jax.jit(partial(evaluate_feeding_the_scan, program, consts, scans))(world_a, world_b)
        found.update(zip(("on_a", "on_b", "fed_b"), (np.asarray(r, np.float64) for r in runs)))
    return found
