"""Grader for Exercise 3: FSDP written by hand with jax.shard_map.

The checks never call the learner's code: graders/exercises/ex3_fsdp_shard_map/probes.py traces it,
at the shapes drawn here, and sends its programs as data (graders/kit/program.py, issue 31): the
loss's and its value_and_grad's on each mesh, the gradient's on an Auto mesh, and a fresh
fsdp_loss's value_and_grad. This process rebuilds them on its own devices, runs them on its own
inputs, holds them to its own loss and gradient (a float64 NumPy forward pass and its analytic
gradient), reads them and compiles them itself; the FLOP budget comes from the grader's own
single-device JAX program. Without --sandbox the probes run in this process and hand over the
traced programs in place of their encoding (handed_back; probes.IN_PROCESS), the same programs. The learner's function runs on meshes of 8, 4 and 2 of the child's 8
CPU devices, each at sizes of its own drawn from the grading seed.

Technique checks read the loss program as dataflow (probes.summarize, followed into every jit,
checkpoint and custom_vjp/custom_jvp of the shard_map's body): the loss must be the shard_map's
own output, so a shard_map whose result is discarded, scaled by zero or averaged outside earns
nothing; how the local losses are averaged is measured, not read (a pmean and a psum of scaled
losses are the same average); and the program is re-run with other weights entering the
shard_map sharded, so weights used from another copy are seen by what they compute, not by their
spelling. A program read must compute the loss (or a named mistake of it) and agree with the
value_and_grad program the numeric checks run. The compiled gradient's collectives are judged by
the elements they move.
"""

import functools
import secrets

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from graders.kit import jaxpr, costs, hlo, program
from graders.kit.expected import expected
from graders.kit.verdicts import fail
from graders.kit.numeric import as_scalar, assert_close, is_close, rng
from graders.exercises.ex3_fsdp_shard_map.probes import (AXIS, HANDED, IN_PROCESS, ROWS, WEIGHTS, mesh, placed,
                                                         primitive, sharding_data, summarize, unwrapped)

BATCH = (2, 3)  # x and y: the loss's inputs after w1 and w2, in jax's flattening of (p, x, y)

MESH_SIZES = (8, 4, 2)
# Each mesh gets sizes of its own, drawn from the grading seed, so no one shape written into a
# solution is right on every mesh. Every size is a multiple of 8, so every device of every mesh
# gets whole rows; small, so each mesh compiles in a moment. Two meshes have D != H (a transposed
# weight cannot pass by accident there) and one has D == H (the edge a shape mix-up slips through).
DIMS = (8, 16, 24, 32, 40)
BATCHES = (16, 24, 32, 40, 48)
EQUAL_ON = 2
# The program is read on 4 devices: a divisor fixed at 8 (or jax.device_count()) shows as a
# number that is not the axis size, which it would be on 8.
READ_ON = 4
# A device of an N-device mesh should do about 1/N of the single-device program's FLOPs; the
# reference does exactly 1/N, jit's own sharding ~1.05/N, and a device that computes the whole
# batch N/N. 1.5 separates the two with room on either side.
FLOP_SLACK = 1.5


def sizes(seed: int, n: int) -> tuple[int, int, int]:
    """(D, H, B) for the n-device mesh: D and B differ from mesh to mesh; H == D on the mesh
    EQUAL_ON only."""
    r = rng([seed, 3])
    ds, bs = r.permutation(DIMS)[:len(MESH_SIZES)], r.permutation(BATCHES)[:len(MESH_SIZES)]
    hs = [int(r.choice([v for v in DIMS if v != d])) for d in ds]
    i = MESH_SIZES.index(n)
    return int(ds[i]), int(ds[i]) if n == EQUAL_ON else hs[i], int(bs[i])


def weight_shapes(seed: int, n: int) -> dict:
    d, h, _ = sizes(seed, n)
    return {"w1": (d, h), "w2": (h, d)}


def problem(seed: int, n: int, k: int):
    """Inputs number k for the n-device mesh, at that mesh's sizes."""
    d, h, b = sizes(seed, n)
    r = rng([seed, n, k])
    p = {"w1": r.normal(size=(d, h)) * 0.3, "w2": r.normal(size=(h, d)) * 0.3}
    return p, r.normal(size=(b, d)), r.normal(size=(b, d))


@expected
def loss_np(p, x, y) -> float:
    return float(np.mean((np.maximum(x @ p["w1"], 0.0) @ p["w2"] - y) ** 2))


@expected
def grad_np(p, x, y) -> dict:
    """Analytic gradient of mean((relu(x w1) w2 - y)^2), in float64."""
    h = x @ p["w1"]
    a = np.maximum(h, 0.0)
    d_out = 2.0 * (a @ p["w2"] - y) / y.size
    return {"w1": x.T @ ((d_out @ p["w2"].T) * (h > 0)), "w2": a.T @ d_out}


def single_loss(p, x, y):
    return jnp.mean((jax.nn.relu(x @ p["w1"]) @ p["w2"] - y) ** 2)


@functools.cache
@expected
def single_device_gradient_flops(d: int, h: int, b: int) -> float:
    """FLOPs of the grader's own gradient program on one device, at these sizes."""
    r = rng(0)
    args = ({"w1": r.normal(size=(d, h)), "w2": r.normal(size=(h, d))}, r.normal(size=(b, d)), r.normal(size=(b, d)))
    args = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), args)
    return costs.flops(costs.compile_fn(jax.grad(single_loss), *args))


REBOUND_FACTORY = ("a shard_map made without mesh= binds to the first mesh it is called under, so one module-level "
                   "shard_map cannot serve several meshes. Hint: build a new jax.shard_map(..., mesh=mesh) inside "
                   "make_fsdp_loss(mesh) on every call, and pass it the mesh you were given.")
REBOUND_AT_IMPORT = ("your module was imported afresh for this mesh, yet its fsdp_loss was already bound to another "
                     "one: something at module level calls it (or builds it with a fixed mesh=). A shard_map made "
                     "without mesh= binds to the first mesh it is called under. Hint: keep only "
                     "fsdp_loss = make_fsdp_loss(None) at module level, and call it only from inside functions.")


# ---- what the probes send back --------------------------------------------------------------

def problem_message(problem: dict, rebound: str) -> str:
    """What a problem the probe met (JAX's error about the learner's shard_map, or a missing
    function) means, in the checks' words."""
    kind = problem["kind"]
    if kind == "in_specs_mismatch":
        return (f"your shard_map's in_specs do not match how the arguments arrive ({problem['text']}). "
                "w1, w2, x and y all arrive as P('fsdp', None); a weight declared P() would have to be whole "
                "on every device, which is what FSDP avoids. Hint: in_specs=({'w1': P('fsdp', None), "
                "'w2': P('fsdp', None)}, P('fsdp', None), P('fsdp', None)), and gather the weights inside "
                "with lax.all_gather(..., 'fsdp', tiled=True).")
    if kind == "rebound":
        return f"the loss made for one mesh ran bound to another ({problem['text']}): {rebound}"
    if kind == "in_specs_not_inferred":
        return ("shard_map could not infer in_specs: this check runs your function on a mesh whose axis is "
                "Auto, where they cannot be inferred. Hint: write in_specs out: "
                "({'w1': P('fsdp', None), 'w2': P('fsdp', None)}, P('fsdp', None), P('fsdp', None)).")
    if kind == "no_make_fsdp_loss":
        return ("the module has no make_fsdp_loss(mesh). The chapter asks only for fsdp_loss, but a module-level "
                "shard_map binds to the first mesh it is called under, so this package grades the loss on several "
                "meshes through make_fsdp_loss(mesh), which builds it for the mesh it is given. Hint: def "
                "make_fsdp_loss(mesh): return jax.shard_map(local_loss, mesh=mesh, in_specs=..., out_specs=P()).")
    if kind == "not_a_function":
        return f"make_fsdp_loss(mesh) should return a function loss(p, x, y), got {problem['type']}."
    if kind == "not_a_scalar":
        return (f"the loss should be a float32 scalar, replicated (out_specs=P()), got {problem['shape']}. "
                "Hint: return lax.pmean(local, 'fsdp') of the local mean loss.")
    if kind == "no_fsdp_loss":
        return "the module has no function fsdp_loss. Hint: at module level write fsdp_loss = make_fsdp_loss(None)."
    return f"could not check what your code returned: the probe reported {kind!r}."


_REPLIES: dict = {}
_PENDING: dict = {}  # (probe, n) -> the reader of a call sent before a check asked for it


def ask(worker, name: str, n: int, *args, rebound: str = REBOUND_FACTORY, seed: int | None = None):
    """worker.name(n, *args): the probe `name` on an n-device mesh, asked once (several checks
    read one program; each probe and mesh size always gets the same inputs), failing the check
    with the problem's meaning if the probe met one. A reply is kept only if it came back: code
    that raised is asked again by the next check, as it is run again. With the seed, a reply that
    came back sends the call after it in ASKED (send_next)."""
    if (name, n) not in _REPLIES:
        nonce()
        read = _PENDING.pop((name, n), None)
        _REPLIES[name, n] = handed_back(read() if read is not None else getattr(worker, name)(n, *args), name, n)
        if seed is not None:
            send_next(worker, seed, (name, n))
    reply = _REPLIES[name, n]
    if isinstance(reply, dict) and "problem" in reply:
        fail(problem_message(reply["problem"], rebound))
    return reply


def asked_in_order() -> tuple:
    """(probe, n, inputs) of every probe call, in the order the checks first make them."""
    return (*(("programs", n, READ_INPUTS) for n in MESH_SIZES), ("auto_gradient_program", 8, 8),
            *(("fresh_program", n, 11) for n in MESH_SIZES))


def send_next(worker, seed: int, done: tuple) -> None:
    """Under --sandbox, the call after `done` in asked_in_order() sent now (worker.overlapped), so
    the worker traces it while this process rebuilds, runs and reads the reply it just got; ask()
    reads it when a check asks for it. One at a time, and only after a reply came back: the
    learner's code sees its calls in the order the checks make them, whatever raises. Without
    --sandbox no call is made ahead (nothing would run it meanwhile)."""
    calls = asked_in_order()
    after = [i for i, (name, n, _) in enumerate(calls) if (name, n) == done]
    if not after or after[0] + 1 == len(calls):
        return
    name, n, inputs = calls[after[0] + 1]
    if (name, n) in _REPLIES or (name, n) in _PENDING:
        return
    read = getattr(worker.overlapped, name)(n, *problem(seed, n, inputs))
    if read is not None:
        _PENDING[name, n] = read


def nonce() -> str:
    """This judge's nonce, kept in its own process's probes module (probes.IN_PROCESS): a probe
    that finds it there runs in this process (no --sandbox) and hands its programs over."""
    return IN_PROCESS.setdefault("judge", secrets.token_hex(16))


def handed_back(reply, name: str, n: int):
    """The reply with each program the probe handed over in this process (probes.HANDED in its
    place) given its encoding back, as a reply under --sandbox holds it; the traced program kept
    for `decoded`, which reads it in place of rebuilding the encoding. A HANDED that no program
    was filed for here stays, and is read as no program."""
    def handed(message) -> bool:
        return isinstance(message, dict) and set(message) == set(HANDED)

    def back(message, kind):
        filed = IN_PROCESS.pop((nonce(), name, n, kind), None) if handed(message) else None
        if filed is None:
            return message
        _REPLIES[("handed", name, kind, n)] = filed[1]
        return filed[0]
    if handed(reply):
        return back(reply, None)
    if isinstance(reply, dict) and any(handed(v) for v in reply.values()):
        return {k: back(v, k) for k, v in reply.items()}
    return reply


def spec_of(data: dict):
    """The PartitionSpec a probe described (spec_data), rebuilt here."""
    parts = [P.UNCONSTRAINED if isinstance(part, dict) else part for part in data["parts"]]
    try:
        return P(*parts, unreduced=set(data["unreduced"]), reduced=set(data["reduced"]))
    except (TypeError, ValueError):
        return None


def sharded_by_rows(m, spec) -> bool:
    if spec is None:
        return False
    try:
        return NamedSharding(m, ROWS).is_equivalent_to(NamedSharding(m, spec), 2)
    except (TypeError, ValueError, AttributeError):
        return False


def holds_rows(m, layout: dict, shape) -> bool:
    """Whether an array laid out as the probe described (sharding_data) sits on m as P("fsdp", None)
    would put it: the same rows on the same devices, in the same memory."""
    expected = NamedSharding(m, ROWS)
    rows = sorted([device.id, [list(s.indices(n)) for s, n in zip(index, shape)]]
                  for device, index in expected.devices_indices_map(tuple(shape)).items())
    return layout["rows"] == rows and layout["memory_kind"] == expected.memory_kind


def is_replicated(parts) -> bool:
    return all(part is None for part in parts)


def loss_mistakes(expected: float, n: int):
    mistakes = [(n * expected,
                 f"That is {n} times the loss: the sum of the {n} devices' local losses, because lax.psum adds "
                 "them. Hint: average across devices with lax.pmean(local, 'fsdp').")]
    for k in sorted({8, jax.device_count()} - {n}):
        mistakes.append((n * expected / k,
                         f"That is the devices' summed local losses divided by {k} (a fixed count, or "
                         f"jax.device_count()), though this mesh has {n} devices. Hint: use lax.pmean, which "
                         "divides by the size of the mesh axis."))
    return mistakes


def check_gradients(reply, expected, n: int, where: str):
    got = reply["grads"]
    if not isinstance(got, dict) or set(got) != set(WEIGHTS):
        fail(f"the gradient{where} should be a dict with keys 'w1' and 'w2' like p, got {reply['type']}.")
    for k in WEIGHTS:
        mistakes = [(n * expected[k],
                     f"That is {n} times the gradient: lax.psum adds the devices' local losses instead of averaging "
                     "them. Hint: use lax.pmean(local, 'fsdp').")]
        for c in sorted({8, jax.device_count()} - {n}):
            mistakes.append((n * expected[k] / c,
                             f"That is the gradient of the summed local losses divided by {c}, though this mesh has "
                             f"{n} devices. Hint: use lax.pmean, never a fixed or global device count."))
        assert_close(got[k], expected[k], f"gradient of {k}{where}", mistakes=mistakes)


# ---- reading the traced loss -------------------------------------------------------------

READ_INPUTS, OTHER_INPUTS = 7, 17  # which of a mesh's draws the program is traced at, and re-run with
# Every mesh's program is read, READ_ON's first: what is wrong on one mesh only is named there.
READ_ORDER = (READ_ON, *(n for n in MESH_SIZES if n != READ_ON))


# ---- the learner's programs, rebuilt, read and run here (graders/kit/program.py) -------------

def _flat(m, p, x, y) -> list:
    """The inputs placed on m, as the programs take them: w1, w2 (WEIGHTS order), x, y (placed
    once per mesh and draw: several checks run programs on the same draw)."""
    arrays = [np.asarray(p[k]) for k in WEIGHTS] + [np.asarray(x), np.asarray(y)]
    key = ("placed", id(m), tuple((a.shape, a.tobytes()) for a in arrays))
    if key not in _REPLIES:
        _REPLIES[key] = jax.tree.leaves(placed(m, p, x, y))
    return _REPLIES[key]


def _shapes(closed, which: str) -> list:
    return [tuple(v.aval.shape) for v in getattr(closed, which)]


def decoded(worker, seed: int, n: int, kind: str, *, probe: str = "programs", inputs: int = READ_INPUTS,
            auto: bool = False, outputs: int = 1, what: str = "your loss", rebound: str = REBOUND_FACTORY):
    """The program `kind` of the probe's reply (traced on n devices at draw `inputs`), rebuilt on
    this process's own devices and type-checked (or, handed over in this process, the traced
    program itself: see handed_back); its inputs and outputs of the shapes asked."""
    key = ("decoded", probe, kind, n)
    if key not in _REPLIES:
        reply = ask(worker, probe, n, *problem(seed, n, inputs), rebound=rebound, seed=seed)
        message = reply.get(kind) if isinstance(reply, dict) and kind else reply
        try:
            handed = _REPLIES.get(("handed", probe, kind, n))
            _REPLIES[key] = handed if handed is not None else program.decode(message, meshes=True).closed
        except program.ProgramError as exc:
            _REPLIES[key] = exc
    closed = _REPLIES[key]
    if isinstance(closed, program.ProgramError):
        fail(f"the program of {what} on a mesh of {n} devices could not be read: {closed}.")
    shapes = weight_shapes(seed, n)
    _, _, b = sizes(seed, n)
    want_in = [shapes["w1"], shapes["w2"], (b, shapes["w1"][0]), (b, shapes["w1"][0])]
    if _shapes(closed, "invars") != want_in:
        fail(f"the program sent for {what} on {n} devices takes inputs of shapes {_shapes(closed, 'invars')}, "
             f"not those of (p['w1'], p['w2'], x, y): {want_in}.")
    got_out = _shapes(closed, "outvars")
    if len(got_out) != outputs or (outputs == 3 and got_out[1:] != [shapes["w1"], shapes["w2"]]) or (
            outputs == 2 and got_out != [shapes["w1"], shapes["w2"]]):
        if outputs == 1:
            fail(f"the loss should return one scalar, got {len(got_out)} values.")
        fail(f"the program sent for {what} on {n} devices gives values of shapes {got_out}, not the loss and "
             "both gradients.")
    return closed


def ran(closed, n: int, *draws, auto: bool = False, compiled: bool = False):
    """The rebuilt program run on this process's own mesh of n devices, once per draw (p, x, y),
    as float64 arrays; with compiled, also the compiled program (one compilation serves all)."""
    m = mesh(n, auto)
    fn = jax.jit(program.as_one_call(closed, m))
    try:
        with jax.set_mesh(m):
            exe = fn.lower(*_flat(m, *draws[0])).compile()
            outs = [exe(*_flat(m, *d)) for d in draws]
    except Exception as exc:  # noqa: BLE001 (a program JAX's type rules accepted but XLA refuses)
        fail(f"the grader could not run the program it rebuilt on {n} devices ({type(exc).__name__}: "
             f"{' '.join(str(exc).split())[:200]}).")
    values = [[np.asarray(v, np.float64) for v in out] for out in outs]
    return (values, exe, outs) if compiled else values


def traced(worker, seed: int, n: int):
    """The summary of make_fsdp_loss(mesh)'s loss program on n devices, read here."""
    key = ("read", n)
    if key not in _REPLIES:
        closed = decoded(worker, seed, n, "loss")
        try:
            _REPLIES[key] = summarize(closed)
        except Exception as exc:  # noqa: BLE001 (a program JAX's rules accepted that the reading cannot follow)
            fail(f"the program of your loss on {n} devices could not be read ({type(exc).__name__}: "
                 f"{' '.join(str(exc).split())[:200]}).")
    read = _REPLIES[key]
    if read["outputs"] != 1:
        fail(f"the loss should return one scalar, got {read['outputs']} values.")
    return read


def loss_shard_map(worker, seed: int, n: int = READ_ON):
    """The summary of the traced loss on n devices, if the loss is a shard_map's own output: the
    loss must leave the shard_map as it is, so nothing outside it (a mean, a `* 0`, another
    program) counts."""
    read = traced(worker, seed, n)
    if read["is_shard_map"]:
        return read
    if not read["shard_maps"]:
        seen = ", ".join(sorted({jaxpr.said(name) for name in read["primitives"]})) or "nothing"
        fail(f"there is no shard_map in the traced loss (it holds: {seen}): jit's own sharding computes it, not "
             "your shard_map. Hint: write the per-device loss and wrap it in jax.shard_map(..., mesh=mesh, "
             "in_specs=..., out_specs=P()); the communication is yours to write, with lax.all_gather and lax.pmean.")
    if not read["upstream"]:
        fail(f"your loss holds a shard_map, but its result is discarded: the loss is made by {read['made_by']} "
             "from other values. Hint: return the shard_map's result itself as the loss.")
    specs = read["upstream_out_specs"]
    if any(not is_replicated(s["parts"]) for s in specs):
        fail(f"the shard_map returns per-device values (out_specs {', '.join(s['text'] for s in specs)}) and the loss "
             f"is made from them outside it, by {read['made_by']}: the averaging across devices is left to jit. "
             "Hint: average inside the shard_map with lax.pmean(local, 'fsdp') and use out_specs=P().")
    fail(f"the loss is not the shard_map's own result: {read['made_by']} outside the shard_map makes it from that "
         "result (and perhaps other values), so the shard_map may not be what computes it. Hint: return the "
         "shard_map's result itself as the loss: the lax.pmean inside it already makes it global.")


def inputs_into(read, collective) -> set:
    """Which of the loss's own inputs (0, 1: w1, w2; 2, 3: x, y) flow into a collective of the body."""
    entering = read["entering"]
    return {entering[j]["input"] for j in collective["inputs"]} - {None}


# ---- holding a program to the grader's own numbers ---------------------------------------
# A program is read only if it computes the loss (or its gradient) on the grader's inputs, or a
# named mistake of it: a multiple (a psum instead of a pmean, a count written in) or one device's
# own local loss (averaged over no axis). A program with the technique's every mark that computes
# anything else is not the learner's loss, and earns nothing.

def local_losses(p, x, y, n: int) -> list:
    """Each device's own local loss on an n-device mesh: the mean over its block of rows."""
    rows = len(x) // n
    return [loss_np(p, x[k * rows:(k + 1) * rows], y[k * rows:(k + 1) * rows]) for k in range(n)]


def computes_the_loss(runs, n: int) -> bool:
    """runs: [(value, p, x, y)]: the values are the loss, one multiple of it for all, or devices'
    local losses."""
    got = [float(np.asarray(r[0]).reshape(-1)[0]) if np.asarray(r[0]).size == 1 else float("nan") for r in runs]
    want = [loss_np(*r[1:]) for r in runs]
    if all(is_close(g, w) for g, w in zip(got, want)):
        return True
    ratios = [g / w for g, w in zip(got, want)]
    if all(np.isfinite(ratios)) and ratios[0] > 0 and all(is_close(r, ratios[0]) for r in ratios):
        return True
    return all(any(is_close(g, local) for local in local_losses(*r[1:], n)) for g, r in zip(got, runs))


def computes_the_gradient(grads: dict, p, x, y) -> bool:
    """The gradients are the grader's own, or one multiple of them (a multiple of the loss)."""
    want = grad_np(p, x, y)
    g = np.concatenate([np.asarray(grads[k], np.float64).reshape(-1) for k in WEIGHTS])
    e = np.concatenate([want[k].reshape(-1) for k in WEIGHTS])
    if g.shape != e.shape or not np.all(np.isfinite(g)):
        return False
    c = float(g @ e / (e @ e))
    return c > 0 and is_close(g, c * e)


def held_to_the_loss(runs, n: int, what: str) -> None:
    if not computes_the_loss(runs, n):
        got, p, x, y = runs[0]
        fail(f"run by the grader on its own inputs, the program of {what} on {n} devices gives "
             f"{float(np.asarray(got).reshape(-1)[0]):.6g} where the loss is {loss_np(p, x, y):.6g} (and it is "
             "neither a multiple of the loss nor one device's local loss): the technique is judged on the program "
             "that computes the loss, and this one computes something else.")


def held_to_the_gradient(grads: dict, p, x, y, n: int, what: str) -> None:
    if not computes_the_gradient(grads, p, x, y):
        fail(f"run by the grader on its own inputs, the program of {what} on {n} devices gives gradients that are "
             "not the loss's gradient (nor a multiple of it): the technique is judged on the program that computes "
             "the gradient, and this one computes something else.")


def fed_positions(read) -> dict:
    """{shard_map input: index into WEIGHTS} of the inputs that are the loss's own weights."""
    return {j: e["input"] for j, e in enumerate(read.get("entering", ())) if e["input"] in (0, 1)}


def swapped_runs(worker, seed: int, n: int) -> dict:
    """The loss program run here three ways at draw READ_INPUTS: as it is; with other weights
    entering its shard_map where the loss's own weights enter, everything else as it was; and
    with the other weights given to the whole program, as a call of the loss with them would.
    The first and the last are held to the loss (computes_the_loss)."""
    key = ("swapped", n)
    if key not in _REPLIES:
        read = loss_shard_map(worker, seed, n)
        closed = decoded(worker, seed, n, "loss")
        p, x, y = problem(seed, n, READ_INPUTS)
        other = problem(seed, n, OTHER_INPUTS)[0]
        positions = fed_positions(read)
        smap = unwrapped(jaxpr.dataflow(closed, getattr(closed, "consts", ()))[1][0]).eqn
        m = mesh(n)
        consts = getattr(closed, "consts", ())

        def apply(eqn, ins, new):
            if eqn is smap and new is not None:
                ins = [new[positions[j]] if j in positions else v for j, v in enumerate(ins)]
            return jaxpr.bind(eqn, ins)

        def run(flat, new):
            return jaxpr.evaluate(closed, consts, flat, lambda e, i: apply(e, i, new))[0]

        def three(flat, new):
            return run(flat, None), run(flat, new), run(list(new) + list(flat[len(new):]), None)

        flat = _flat(m, p, x, y)
        swap = _flat(m, other, x, y)[:2]
        value_and_grad(worker, seed, n)  # compiled for the loss check; run here at draw READ_INPUTS too
        try:
            with jax.set_mesh(m):
                before, swapped, direct = jax.jit(three)(flat, swap)
                both = _REPLIES[("value_and_grad", n)][1](*flat)
        except Exception as exc:  # noqa: BLE001
            fail(f"the grader could not run the program it rebuilt on {n} devices ({type(exc).__name__}: "
                 f"{' '.join(str(exc).split())[:200]}).")
        _REPLIES[key] = {"before": np.asarray(before, np.float64), "swapped": np.asarray(swapped, np.float64),
                         "direct": np.asarray(direct, np.float64), "value_and_grad": np.asarray(both[0], np.float64)}
    runs = _REPLIES[key]
    p, x, y = problem(seed, n, READ_INPUTS)
    held_to_the_loss([(runs["before"], p, x, y), (runs["direct"], problem(seed, n, OTHER_INPUTS)[0], x, y)], n,
                     "your loss")
    # the program read is the one whose value and gradient the other checks run: on the same
    # inputs, the loss program and the value_and_grad program give the same loss
    if not is_close(runs["value_and_grad"], runs["before"]):
        fail(f"run by the grader on the same inputs, the program of your loss on {n} devices gives "
             f"{float(runs['before']):.6g} and the program of its value_and_grad gives "
             f"{float(runs['value_and_grad']):.6g}: they are not one function's programs, so the technique read in "
             "one says nothing of the other.")
    return runs


# ---- checks ------------------------------------------------------------------------------

def value_and_grad(worker, seed: int, n: int):
    """(problem, the loss and gradient) of make_fsdp_loss(mesh)'s value_and_grad program on an
    n-device mesh, run here: one compiled program serves the loss, gradient and compiled checks."""
    problem_n = problem(seed, n, n)
    key = ("value_and_grad", n)
    if key not in _REPLIES:
        closed = decoded(worker, seed, n, "value_and_grad", outputs=3, what="your loss's value_and_grad")
        (values,), exe, _ = ran(closed, n, problem_n, compiled=True)
        _REPLIES[key] = {"loss": values[0], "grads": dict(zip(WEIGHTS, values[1:])), "type": "dict"}, exe
    return problem_n, _REPLIES[key][0]


@pytest.mark.points(1)
def test_loss_matches_single_device(worker, seed):
    """The loss equals the single-device loss on meshes of 8, 4 and 2 devices."""
    for n in MESH_SIZES:
        (p, x, y), reply = value_and_grad(worker, seed, n)
        expected = loss_np(p, x, y)
        got = as_scalar(reply["loss"], f"loss on a mesh of {n} devices")
        assert_close(got, expected, f"loss on a mesh of {n} devices", mistakes=loss_mistakes(expected, n),
                     hint="Hint: the local loss is the mean over the device's rows; lax.pmean makes it global.")


@pytest.mark.points(1)
def test_gradients_match_single_device(worker, seed):
    """jax.grad of the loss equals the single-device gradient on meshes of 8, 4 and 2 devices."""
    for n in MESH_SIZES:
        (p, x, y), reply = value_and_grad(worker, seed, n)
        check_gradients(reply, grad_np(p, x, y), n, f" on a mesh of {n} devices")


@pytest.mark.points(1)
def test_loss_is_a_pmean_out_of_shard_map(worker, seed):
    """The loss is the shard_map's own output, out_specs P(), averaged over "fsdp" inside it (lax.pmean, or a psum of scaled local losses)."""
    for n in READ_ORDER:
        check_averaged_inside(worker, seed, n)


def check_averaged_inside(worker, seed: int, n: int):
    read = loss_shard_map(worker, seed, n)
    spec = read["out_spec"]
    if not is_replicated(spec["parts"]):
        fail(f"the shard_map gives the loss with out_specs {spec['text']}; expected P(): after lax.pmean every device "
             "holds the same global loss. Hint: out_specs=P().")
    # The averaging is inside when the loss is computed from a collective over "fsdp" that the
    # batch flows into (the weights' gathers take no batch); how it divides is then measured.
    across = [c for c in read["collectives"] if AXIS in c["axes"] and inputs_into(read, c) & set(BATCH)]
    if not across:
        other = sorted({c["function"] for c in read["collectives"] if inputs_into(read, c) & set(BATCH)})
        how = f" ({' and '.join(other)} over no mesh axis)" if other else ""
        fail(f"inside the shard_map (on {n} devices), the local losses are not averaged over the devices: no "
             f"collective over 'fsdp' takes them in{how}, so each device returns its own local loss. That is not "
             "from lax.pmean over the mesh axis. Hint: return lax.pmean(local, 'fsdp').")
    swapped_runs(worker, seed, n)  # the program read computes the loss (or a named mistake of it)
    (p, x, y), reply = value_and_grad(worker, seed, n)
    expected = loss_np(p, x, y)
    got = as_scalar(reply["loss"], f"loss on a mesh of {n} devices")
    if is_close(got, expected):
        return
    where = f"inside the shard_map, on a mesh of {n} devices, the local losses are"
    if is_close(got, n * expected):
        fail(f"{where} summed, not averaged: the loss is {got:.6g}, {n} times the single-device {expected:.6g}. "
             "Hint: lax.pmean(local, 'fsdp') averages them (or divide each by lax.axis_size('fsdp') before a psum).")
    for k in sorted({8, jax.device_count()} - {n}):
        if is_close(got, n * expected / k):
            fail(f"{where} summed and divided by {k}, though on this mesh the axis has {n} devices: the loss is "
                 f"{got:.6g}, not {expected:.6g} (a fixed count, or jax.device_count(), is right on one mesh only). "
                 "Hint: lax.pmean(local, 'fsdp') divides by the axis size.")
    fail(f"the loss on a mesh of {n} devices is {got:.6g}, not {expected:.6g}, and not a sum of the local "
         "losses or that sum divided by a wrong count: this check depends on loss_matches_single_device, which "
         "fails above, so it cannot tell whether the averaging is right.")


# The heart of FSDP, and the one check a shard_map that computes from replicated weights beside
# decoy gathers cannot pass: weighted so that such a solution keeps at most half the points.
@pytest.mark.points(4)
def test_loss_is_computed_from_gathered_shards(worker, seed):
    """w1 and w2 enter that shard_map as P("fsdp", None), are all_gathered inside (at any depth), and the loss is computed from them."""
    for n in READ_ORDER:
        check_computed_from_gathered_shards(worker, seed, n)


def check_computed_from_gathered_shards(worker, seed: int, n: int):
    read = loss_shard_map(worker, seed, n)
    p, x, y = problem(seed, n, READ_INPUTS)
    shapes = weight_shapes(seed, n)
    m = mesh(n)
    entering = read["entering"]
    fed = {}
    for i, k in enumerate(WEIGHTS):
        fed[k] = [j for j, e in enumerate(entering) if e["input"] == i]
        if not fed[k]:
            made = [e for e in entering if e["made_by"] is not None and tuple(e["shape"]) == shapes[k]]
            how = f" (what enters is made by {made[0]['made_by']} first)" if made else ""
            fail(f"on {n} devices, p['{k}'] does not enter the shard_map as it arrives{how}: FSDP keeps each weight split by rows "
                 "and lets shard_map hand each device its slice. Hint: pass p itself, with in_specs "
                 "{'w1': P('fsdp', None), 'w2': P('fsdp', None)}.")
        specs = [entering[j]["in_spec"] for j in fed[k]]
        wrong = [s for s in specs if not sharded_by_rows(m, spec_of(s))]
        if wrong:
            why = ("replicated: every device would store the whole weight, so nothing is sharded"
                   if is_replicated(wrong[0]["parts"]) else "FSDP here splits each weight by rows, dim 0")
            fail(f"on {n} devices, p['{k}'] enters shard_map as {wrong[0]['text']}, expected P('fsdp', None): {why}. Hint: give both "
                 "weights in_specs P('fsdp', None) and gather them inside the body with "
                 "lax.all_gather(..., 'fsdp', tiled=True).")
        # Any gather over the axis that this weight flows into, written at any depth of the body
        # (a jit, checkpoint or custom_vjp inside it), tiled or stacked and reshaped, alone or
        # bucketed with the other weight: the re-run below proves that it does the work.
        into = [c for c in read["collectives"] if i in inputs_into(read, c)]
        if not any(c["function"] == "lax.all_gather" and AXIS in c["axes"] for c in into):
            # what carries the weight across devices, not the loss (which takes the batch too)
            through = sorted({c["function"] for c in into if AXIS in c["axes"] and not inputs_into(read, c) & set(BATCH)})
            if through == ["lax.psum"]:
                how = ("it reaches the loss only through lax.psum, which sums the whole weight on every device (an "
                       "all-reduce: twice the traffic of a gather, and its gradient is summed whole too)")
            elif through:
                how = f"it reaches the loss only through {' and '.join(through)}, which is not a gather"
            else:
                how = "each device must gather the whole weight before using it"
            fail(f"on {n} devices, p['{k}'] enters the shard_map split by rows, but no lax.all_gather over 'fsdp' of it leads to the "
                 f"loss: {how}. Hint: {k} = lax.all_gather(p_blk['{k}'], 'fsdp', tiled=True) inside the body, and "
                 f"use that {k}.")
    # Re-run the traced program with other weights entering the shard_map sharded, everything
    # else as it was: a loss computed from those shards follows them as the whole program does
    # when called with those weights; one computed from another copy does not.
    other = problem(seed, n, OTHER_INPUTS)[0]
    runs = swapped_runs(worker, seed, n)
    what = f"the loss on {n} devices with other weights entering the shard_map"
    got, before, direct = (as_scalar(runs[key], what) for key in ("swapped", "before", "direct"))
    expected = loss_np(other, x, y)
    if is_close(got, expected) or (is_close(got, direct) and not is_close(got, before)):
        return  # the second: the loss follows the shards, and its numbers are wrong elsewhere (checked above)
    if is_close(got, before):
        fail(f"on {n} devices, with other weights entering the shard_map as P('fsdp', None), your loss stays {got:.6g} (the old "
             f"weights' loss) instead of {expected:.6g}: it is computed from another copy of the weights (replicated, "
             "or taken from outside the shard_map), and the gathered shards do no work. Hint: compute the loss from "
             "lax.all_gather(p_blk[...], 'fsdp', tiled=True) of the shard_map's own weight arguments.")
    fail(f"on {n} devices, with other weights entering the shard_map as P('fsdp', None), your loss is {got:.6g}, but those weights' "
         f"loss is {expected:.6g} (and your loss called with them gives {direct:.6g}): the loss is not computed from "
         "the gathered shards alone. Hint: compute the whole loss from lax.all_gather(p_blk[...], 'fsdp', "
         "tiled=True) of the shard_map's own weight arguments.")


@pytest.mark.points(1)
def test_gradients_stay_sharded(worker, seed):
    """Both gradients come out as P("fsdp", None), on a mesh whose axis is Auto."""
    # On an Explicit mesh a gradient's sharding is its parameter's type, P("fsdp", None) whatever
    # the program did; on an Auto mesh it is what the compiled program actually produces.
    n = 8
    closed = decoded(worker, seed, n, None, probe="auto_gradient_program", inputs=8, outputs=2,
                     what="your loss's gradient")
    p, x, y = problem(seed, n, 8)
    _, _, (outs,) = ran(closed, n, (p, x, y), auto=True, compiled=True)
    held_to_the_gradient({k: np.asarray(v, np.float64) for k, v in zip(WEIGHTS, outs)}, p, x, y, n,
                         "your loss's gradient")
    shapes = weight_shapes(seed, n)
    got = {k: sharding_data(v.sharding, shapes[k]) for k, v in zip(WEIGHTS, outs)}
    m = mesh(n, auto=True)
    if not all(holds_rows(m, got[k], shapes[k]) for k in WEIGHTS):
        fail(f"the gradients come out as w1: {got['w1']['spec']}, w2: {got['w2']['spec']}; expected "
             "P('fsdp', None) for both, each device holding the gradient of its own rows. Whole gradients on "
             "every device mean the weights were used replicated, not sharded. Hint: take the weights in as "
             "P('fsdp', None) and lax.all_gather them inside shard_map: the transpose of that gather is a "
             "reduce-scatter that hands each device its slice.")


def compiled_gradient(worker, seed: int, n: int):
    """The figures of the learner's value_and_grad program on an n-device mesh, compiled here
    (the compilation the loss and gradient checks ran) for the FLOP and HLO checks: per-device
    FLOPs, collectives counted, the element count of each all-reduce's largest result, and how
    many elements each all-gather and reduce-scatter moved. The program is first held to the
    grader's own loss and gradient."""
    (p, x, y), reply = value_and_grad(worker, seed, n)
    held_to_the_loss([(reply["loss"], p, x, y)], n, "your loss's value_and_grad")
    held_to_the_gradient(reply["grads"], p, x, y, n, "your loss's value_and_grad")
    key = ("compiled", n)
    if key not in _REPLIES:
        exe = _REPLIES[("value_and_grad", n)][1]
        text = exe.as_text()
        _REPLIES[key] = {"flops": costs.flops(exe), "collectives": hlo.collective_counts(text),
                         "all_reduce_sizes": hlo.collective_sizes(text, "all-reduce"),
                         "all_gather_elements": hlo.collective_elements(text, "all-gather"),
                         "reduce_scatter_elements": hlo.collective_elements(text, "reduce-scatter")}
    return _REPLIES[key]


@pytest.mark.points(1)
def test_each_device_does_its_share_of_the_work(worker, seed, note):
    """Per-device FLOPs of the compiled gradient on 8 devices are about 1/8 of the single-device program's."""
    n = 8
    got = float(compiled_gradient(worker, seed, n)["flops"])
    single = single_device_gradient_flops(*sizes(seed, n))
    share = single / n
    note(f"per-device FLOPs of your compiled gradient on {n} devices: {got:,.0f} "
         f"(single device: {single:,.0f}; a 1/{n} share: {share:,.0f})")
    # `not >=`, so that a figure that is not a number (NaN) is wrong too: no program that computes
    # the whole gradient, split over n devices, does much less than its share on each
    if not got >= share / FLOP_SLACK:
        fail(f"each device does {got:,.0f} FLOPs in the compiled gradient; the single-device program does "
             f"{single:,.0f}, so a device's share on {n} devices is about {share:,.0f}. Yours is less than "
             f"1/{FLOP_SLACK:g} of that: no compiled gradient of the whole batch does so little on each device.")
    if got > FLOP_SLACK * share:
        why = ("every device computes on the whole batch, as if alone" if got >= 0.8 * single
               else "each device does more than its part")
        fail(f"each device does {got:,.0f} FLOPs in the compiled gradient; the single-device program does "
             f"{single:,.0f}, so a device's share on {n} devices is about {share:,.0f}. Yours is {got / share:.1f} "
             f"times that: {why}. Hint: keep the batch sharded, so each device computes the loss on its own "
             "B/N rows; gather only the weights.")


@pytest.mark.points(2)
def test_gradient_all_gathers_and_reduce_scatters(worker, seed, note):
    """The compiled gradient all-gathers both whole weights and reduce-scatters both gradients, never all-reducing one whole."""
    n = 8
    compiled = compiled_gradient(worker, seed, n)
    counts = compiled["collectives"]
    gathers, scatters, reduces = counts["all-gather"], counts["reduce-scatter"], counts["all-reduce"]
    # What moved, not how many instructions moved it: one gather of both weights bucketed together
    # is as right as two. Both weights whole are sum(D*H + H*D) elements gathered; their gradients'
    # rows, 1/n of that, reduce-scattered onto each device.
    weights = sum(a * b for a, b in weight_shapes(seed, n).values())
    gathered = sum(compiled.get("all_gather_elements") or [])  # none in a reply that leaves them out
    scattered = sum(compiled.get("reduce_scatter_elements") or [])
    # A whole weight gradient summed on every device: the signature of weights used replicated.
    whole = [s for s in compiled["all_reduce_sizes"] if s >= min(a * b for a, b in weight_shapes(seed, n).values())]
    note(f"collectives in your compiled gradient: {gathers} all-gather ({gathered:,} elements), "
         f"{scatters} reduce-scatter ({scattered:,} elements), {reduces} all-reduce")
    if gathered >= weights and scattered >= weights // n and not whole:
        return
    found = (f"the compiled gradient holds {gathers} all-gather ({gathered:,} elements gathered), {scatters} "
             f"reduce-scatter ({scattered:,} elements received) and {reduces} all-reduce")
    need = (f"FSDP gathers both whole weights in the forward pass ({weights:,} elements) and reduce-scatters their "
            f"gradients, each device receiving the summed gradient of its own rows ({weights // n:,} elements), "
            "and sums no weight gradient whole")
    if whole:
        why = (f"{len(whole)} all-reduce(s) of {max(whole)} elements sum a whole weight gradient on every device, "
               "then slice it (what jit's own sharding compiles to on CPU, or what weights used replicated give)")
    elif gathered < weights:
        why = "the weights are not (both) gathered"
    else:
        why = "the gradients are not scattered back to their rows"
    fail(f"{found}; {need}. Here {why}. Hint: gather each weight yourself with lax.all_gather(..., 'fsdp', "
         "tiled=True) inside jax.shard_map and compute only from that; jax.grad turns the gather into a reduce-scatter.")


@pytest.mark.points(1)
def test_fsdp_loss_is_a_shard_map_right_on_every_mesh(worker, seed):
    """The module-level fsdp_loss, under jax.set_mesh of 8, 4 and 2 devices, is a shard_map giving the right loss and gradient."""
    for n in MESH_SIZES:
        p, x, y = problem(seed, n, 11)
        reply = fresh_run(worker, seed, n)
        where = f" of fsdp_loss under jax.set_mesh ({n} devices)"
        if not reply["is_shard_map"]:
            fail(f"the loss{where} is made by {reply['made_by']}, not by a shard_map: fsdp_loss must be the chapter's "
                 "shard_map FSDP loss itself. Hint: at module level write fsdp_loss = make_fsdp_loss(None).")
        expected = loss_np(p, x, y)
        assert_close(as_scalar(reply["loss"], "loss" + where), expected, "loss" + where,
                     mistakes=loss_mistakes(expected, n))
        check_gradients(reply, grad_np(p, x, y), n, where)


def _mesh_kinds_as_one(message):
    """A program message with every mesh named as a Mesh: a shard_map made without mesh= names the
    context's AbstractMesh where one made with mesh= names the Mesh, the same axes either way."""
    if isinstance(message, dict):
        return {k: (["Mesh", *v[1:]] if k == "mesh" and isinstance(v, list) and v[:1] == ["AbstractMesh"]
                    else _mesh_kinds_as_one(v)) for k, v in message.items()}
    if isinstance(message, list):
        return [_mesh_kinds_as_one(v) for v in message]
    return message


def same_program(a, b) -> bool:
    """Whether two program messages hold one program (their meshes by axes alone), compared value
    by value: the judge then rebuilds, compiles and reads it once."""
    def same(u, v) -> bool:
        if type(u) is not type(v):
            return False
        if isinstance(u, dict):
            return u.keys() == v.keys() and all(same(u[k], v[k]) for k in u)
        if isinstance(u, list):
            return len(u) == len(v) and all(same(x, y) for x, y in zip(u, v))
        if isinstance(u, np.ndarray):
            return u.dtype == v.dtype and u.shape == v.shape and bool(np.array_equal(u, v))
        return u == v
    return isinstance(a, dict) and "program" in a and same(_mesh_kinds_as_one(a), _mesh_kinds_as_one(b))


def fresh_run(worker, seed: int, n: int) -> dict:
    """The value_and_grad program of a fresh import's fsdp_loss on n devices, rebuilt here: what
    makes its loss (the program's first output), and its loss and gradient run here at draw 11.
    Where it is the very program of make_fsdp_loss(mesh)'s value_and_grad (fsdp_loss =
    make_fsdp_loss(None)), the one rebuilt and compiled for that is run."""
    fresh = ask(worker, "fresh_program", n, *problem(seed, n, 11), rebound=REBOUND_AT_IMPORT, seed=seed)
    made = _REPLIES.get(("programs", n))
    if (isinstance(made, dict) and "value_and_grad" in made and ("value_and_grad", n) in _REPLIES
            and same_program(fresh, made["value_and_grad"])):
        closed = decoded(worker, seed, n, "value_and_grad", outputs=3, what="your loss's value_and_grad")
        exe = _REPLIES[("value_and_grad", n)][1]
        m = mesh(n)
        with jax.set_mesh(m):
            loss, *grads = [np.asarray(v, np.float64) for v in exe(*_flat(m, *problem(seed, n, 11)))]
    else:
        closed = decoded(worker, seed, n, None, probe="fresh_program", inputs=11, outputs=3,
                         what="fsdp_loss's value_and_grad", rebound=REBOUND_AT_IMPORT)
        ((loss, *grads),) = ran(closed, n, problem(seed, n, 11))
    try:
        _, outputs = jaxpr.dataflow(closed, getattr(closed, "consts", ()))
        out = unwrapped(outputs[0])
    except Exception as exc:  # noqa: BLE001
        fail(f"the program of fsdp_loss's value_and_grad on {n} devices could not be read ({type(exc).__name__}: "
             f"{' '.join(str(exc).split())[:200]}).")
    return {"made_by": primitive(out), "is_shard_map": out.eqn is not None and jaxpr.is_a(out.eqn, "shard_map"),
            "loss": loss, "type": "dict", "grads": dict(zip(WEIGHTS, grads))}
