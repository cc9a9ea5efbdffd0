"""Grader for Exercise 2: sqrt(L) grouped checkpointing.

The checks never call the learner's code: graders/exercises/ex2_sqrt_checkpointing/probes.py traces and
compiles it, and hands back plain data (the layout of each traced program, and the temporary
memory, loss and gradient of each compiled one). Expected values come from the grader's own
programs: a float64 NumPy forward and backward pass, and `memory_analysis()` of the grouped
checkpoint the exercise asks for, written and compiled here (never the learner's own curve). The
layout of checkpoints, scans and remat policies is read from the traced jaxpr, in the probes.
The memory configurations are drawn from the grading seed, so no figure can be looked up.

Speed: each of the learner's programs is compiled once (value_and_grad: the loss, the gradient
and the memory come from one executable), by one probe call for all of them, in which
independent compilations run in threads (XLA releases the GIL while it compiles).
"""

import functools
import math
from collections import Counter
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from concurrent.futures import ThreadPoolExecutor

from graders.kit import figure_store, costs, program as program_data
from graders.kit.expected import expected, recorded_ahead
from graders.kit.verdicts import CheckFailed, Deferred, Verdict, fail
from graders.kit.numeric import as_int, as_scalar, assert_close, float32_rtol, is_close, max_abs_diff, rng
from graders.exercises.ex2_sqrt_checkpointing.probes import (gradient_temp, loss_of, measure_all, residual_bytes,
                                                             saves_nothing, shapes, summary)

# A fixed small configuration whose jaxprs are read (tracing only, nothing is compiled), for every
# k a solution can get wrong: 1, L, and two middle k with k != L/k, so groups taken the wrong way
# round (k groups of L/k) show.
TRACE_CONFIG, TRACE_KS = (24, 3, 2), (1, 4, 8, 24)

# The memory configuration, drawn from the grading seed. L gives a sqrt(L) lesson (below about 30
# layers the per-program overhead flattens the curve); B > D keeps the activations the larger
# part of what a layer saves, so a middle k beats both k=1 and k=L on every draw (checked for all
# of them when the grader was written). Every axis a distinct size; compile time hardly depends
# on the sizes, the margins do.
MEMORY_LS, MEMORY_BS, MEMORY_DS = (32, 48, 64), (5, 7, 9), (2, 3, 4)

# best_group_size: two configurations with the SAME L whose least-memory k differ, so no formula
# in L alone (the divisor nearest sqrt(L), or sqrt(L/2), ...) finds both. What one layer saves
# for the backward pass grows with D*D as well as B*D, so the optimum sqrt(L * a_in / a_layer)
# moves with the shapes: more rows than features against 2 rows and many features. L is drawn
# too, among lengths with many divisors (8 each), so that a search over a few of them misses: in
# the first kind the least is at k=3, which is neither 1, L, the divisor nearest sqrt(L) nor a
# power of two, so a search over {1, ~sqrt(L), L} or over the powers of two does not find it; in
# the second it is at k=1. On every draw every other divisor needs more than 5% more memory
# (measured when the grader was written; tests/test_ex2_grader.py measures every draw again).
# Below about 30 layers, and for other shapes near these, the curve's bottom is flat: two
# divisors within 1-3% of each other. Each search compiles 8 gradients (the learner's own
# best_group_size is the slowest part of grading: 16 compilations, in two threads).
PAIR_SHAPES = {30: (((9, 4), (7, 5)), ((2, 7), (2, 9))),   # L: ((B, D) least at k=3, (B, D) least at k=1)
               42: (((7, 5), (6, 5)), ((2, 7), (2, 9)))}

# Memory of the same technique written another way (jax.remat, prevent_cse=False, the whole scan
# body checkpointed, the weights reshaped with tree.map) measured within 2% of the grader's own
# program; the mistakes this catches (no checkpoint, a policy that saves, one checkpoint per layer
# or around everything) are off by 20% or more.
MEMORY_RTOL = 0.05
# What checkpointing changes is the activations the backward pass holds, and they grow with the
# batch: the memory check compares the growth from B to B + WIDER rows, not the total. Buffers
# that do not grow with the batch are no checkpoint's doing: a scan over group *numbers* that
# indexes the weights (groups[g], lax.fori_loop) accumulates the weights' gradient in its carry
# instead of stacking it as the scan's ys, one more weight-sized buffer (measured: +3.1 KiB at
# L=48, D=4, the same for every k), with the same growth per row within 2%. WIDER * D * 4 bytes is
# a multiple of XLA's 64-byte alignment for every D drawn, so the rounding of a (B, D) buffer
# cancels in the difference.
WIDER = 16
# ... and what does not grow with the batch is bounded too: at most this many weight-sized buffers
# more than the grader's own program (a right variant measured one, and a few hundred bytes),
# so that memory kept for no reason does not pass, nor bends the curve best_group_size ranks.
WEIGHT_BUFFERS = 2


def beyond_the_weights(temp: float, asked: float, L: int, D: int) -> bool:
    """Whether a gradient's temporary memory exceeds the grader's own program's by more than
    MEMORY_RTOL and WEIGHT_BUFFERS weight-sized (L, D, D) float32 buffers."""
    return not temp <= asked * (1 + MEMORY_RTOL) + WEIGHT_BUFFERS * L * D * D * 4
# best_group_size may return any k within 1% of the least (a tie); the runner-up is further off.
TIE_RTOL = 0.01


def divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def middle_k(L: int) -> int:
    """The largest divisor below sqrt(L): a group size near the optimum, with k != L/k."""
    return max(k for k in divisors(L) if k * k < L)


def memory_config(seed: int) -> tuple[int, int, int]:
    r = rng(seed)
    return int(r.choice(MEMORY_LS)), int(r.choice(MEMORY_BS)), int(r.choice(MEMORY_DS))


def pair_configs(seed: int) -> list[tuple[int, int, int]]:
    r = rng(seed + 1)
    L = int(r.choice(sorted(PAIR_SHAPES)))
    return [(L, *(int(n) for n in kind[r.integers(len(kind))])) for kind in PAIR_SHAPES[L]]


def make_inputs(seed, L: int, B: int, D: int):
    """float64 weights (L, D, D) scaled so tanh stays out of saturation, and a batch (B, D)."""
    r = rng(seed)
    return r.normal(size=(L, D, D)) / np.sqrt(D), r.normal(size=(B, D))


def as_f32(w, x):
    return {"w": jnp.asarray(w, jnp.float32)}, jnp.asarray(x, jnp.float32)


def to_f32(w, x):
    """The inputs as float32 NumPy arrays, as the probes take them."""
    return np.asarray(w, np.float32), np.asarray(x, np.float32)


# ---- the grader's own computations ----

@expected
def forward_np(w, x, residual=True, transpose=False):
    for layer_w in w:
        h = np.tanh(x @ (layer_w.T if transpose else layer_w))
        x = x + h if residual else h
    return x


@expected
def gradient_np(w, x):
    """d mean(x_out ** 2) / dW in float64, by hand: x_{l+1} = x_l + tanh(x_l @ W_l)."""
    xs, ts = [x], []
    for layer_w in w:
        ts.append(np.tanh(xs[-1] @ layer_w))
        xs.append(xs[-1] + ts[-1])
    g, grads = 2 * xs[-1] / xs[-1].size, np.zeros_like(w)
    for layer in reversed(range(len(w))):
        gz = g * (1 - ts[layer] ** 2)
        grads[layer] = xs[layer].T @ gz
        g = g + gz @ w[layer].T
    return grads


@expected
def loss_mistakes(w, x):
    """(value, message) for each known wrong way to write the loss, on these inputs."""
    out = forward_np(w, x)
    return [
        (np.sum(out**2), "That is the sum of x_out ** 2, not its mean. Hint: return jnp.mean(x_out ** 2), "
                         "the mean over every entry of the (B, D) output."),
        (np.mean(np.sum(out**2, axis=-1)),
         "That sums over the features and averages over the batch only. Hint: jnp.mean(x_out ** 2) "
         "averages over all B * D entries."),
        (np.mean(forward_np(w, x, residual=False) ** 2),
         "That is a network without the residual connection. Hint: each layer is x <- x + tanh(x @ W[l])."),
        (np.mean(forward_np(w, x, transpose=True) ** 2),
         "That multiplies by W[l].T. Hint: each layer is x <- x + tanh(x @ W[l])."),
    ]


def own_loss(params, x, k=None):
    """The technique the exercise asks for, written by the grader: L/k groups in a scan, one
    jax.checkpoint (saving nothing) per group around a scan over its k layers; k=None: one scan."""
    def layer(x, w):
        return x + jnp.tanh(x @ w), None

    @jax.checkpoint
    def group(x, group_w):
        return jax.lax.scan(layer, x, group_w)[0]

    w = params["w"]
    if k is None:
        x, _ = jax.lax.scan(layer, x, w)
    else:
        x, _ = jax.lax.scan(lambda x, group_w: (group(x, group_w), None), x, w.reshape(w.shape[0] // k, k, *w.shape[1:]))
    return jnp.mean(x**2)


@functools.cache
@expected
def own_temp(L, B, D, k, value_too=False) -> int:
    """temp_size_in_bytes of the grader's own gradient program (value_and_grad if value_too)."""
    fn = (jax.value_and_grad if value_too else jax.grad)(partial(own_loss, k=k))
    return costs.temp_bytes(fn, *shapes(L, B, D))


@functools.cache
def own_figures(seed) -> dict:
    """(L, B, D, k[, value_too]) -> own_temp, for every figure the checks compare with.

    All are compiled first, one after the other, before any learner code is traced: JAX reuses
    parts of programs traced earlier in the process (source locations included), so programs
    traced in threads or after the learner's would get a different persistent-cache key from run
    to run (measured), and these, the grader's own, must hit the cache in the learner's edit loop."""
    L, B, D = memory_config(seed)
    specs = [(L, rows, D, k, True) for rows in (B, B + WIDER) for k in (None, 1, middle_k(L), L)]
    specs += [(L, B, D, None), (L, B, D, middle_k(L))]
    specs += [(*cfg, k) for cfg in pair_configs(seed) for k in divisors(cfg[0])]
    # Kept between runs (graders/kit/figure_store.py): they depend on these specs alone, never on the learner.
    figures = figure_store.stored("ex2 own temp", specs, lambda: [own_temp(*s) for s in specs])
    return dict(zip(specs, figures))


@functools.cache
def own_value_and_grad():
    """One jitted function, so that draws of one configuration share its compiled program."""
    return jax.jit(jax.value_and_grad(own_loss))


@functools.cache
@expected
def own_float32_errors(seed) -> dict:
    """How far the grader's own float32 JAX program (one scan, no checkpoint) is from float64 on
    the memory configuration's inputs: the loss's difference and the gradient's largest. They
    depend on the draw alone, so they are kept between runs (graders/kit/figure_store.py)."""
    config = memory_config(seed)
    w, x = make_inputs(seed, *config)

    def compute():
        loss, grads = own_value_and_grad()(*as_f32(w, x))
        return {"loss": abs(float(loss) - float(np.mean(forward_np(w, x) ** 2))),
                "grad": max_abs_diff(grads["w"], gradient_np(w, x))}
    return figure_store.stored("ex2 own float32 errors", (seed, config), compute)


@expected
def own_residual_bytes(k, L, B, D) -> int:
    """Bytes the backward pass of the grader's own grouped checkpoint keeps (tracing only)."""
    return residual_bytes(partial(own_loss, k=k), L, B, D)


@expected
def own_memory_fields(L, B, D, k) -> dict:
    """The grader's own gradient program's peak memory and the sum of its temporary, argument and
    output memory, and its forward pass's temporary memory: what a wrong temp_memory_bytes may be."""
    stats = costs.compile_fn(jax.grad(partial(own_loss, k=k)), *shapes(L, B, D)).memory_analysis()
    return {"peak": stats.peak_memory_in_bytes,
            "whole": stats.temp_size_in_bytes + stats.argument_size_in_bytes + stats.output_size_in_bytes,
            "forward": costs.temp_bytes(partial(own_loss, k=k), *shapes(L, B, D))}


# ---- the learner's programs: traced and compiled once per grading, in the probes ----

def rebuilt(worker, specs: list) -> list:
    """grouped_loss's programs at each (L, B, D, k) of specs, sent by the worker as data and rebuilt
    here (graders/kit/program.py): every figure of them below is the grader's own measurement."""
    sent = worker.traced_programs([list(spec) for spec in specs])
    if not isinstance(sent, list) or len(sent) != len(specs):
        fail(f"the process running your code sent back {len(sent) if isinstance(sent, list) else 'no'} programs "
             f"of grouped_loss, where the grader asked for {len(specs)}.")
    out = []
    for (L, B, D, k), message in zip(specs, sent):
        try:
            closed = program_data.decode(message).closed
        except program_data.ProgramError as exc:
            fail(f"the program of grouped_loss(k={k}) could not be read: {exc}.")
        if [tuple(v.aval.shape) for v in closed.invars] != [(L, D, D), (B, D)]:
            fail(f"the program sent for grouped_loss(k={k}) takes inputs of shapes "
                 f"{[tuple(v.aval.shape) for v in closed.invars]}, not the grader's ({(L, D, D)}, {(B, D)}).")
        out.append(closed)
    return out


def held_to_the_loss(value, w, x, k) -> None:
    """A program whose layout or memory is judged computes the loss (or a known mistake in it,
    which the loss check names), run by the grader on its own inputs: one that reads like the
    technique but computes something else earns nothing."""
    expected = np.mean(forward_np(w, x) ** 2)
    if is_close(value, expected, rtol=LOSS_HELD_RTOL) or any(
            is_close(value, wrong, rtol=LOSS_HELD_RTOL) for wrong, _ in loss_mistakes(w, x)):
        return
    fail(f"run by the grader on its own inputs, the program of grouped_loss(k={k}) returns {float(value):.6g}, where "
         f"the loss is {expected:.6g}: the technique is judged on the program that computes your loss. "
         "Hint: make the loss right first (the loss check says how).")


# How close a program's loss must be to the float64 loss (or a known mistake) for its layout and
# memory to be judged: float32 over dozens of residual layers, far wider than its rounding (the
# loss check itself holds the value to float32_rtol).
LOSS_HELD_RTOL = 1e-3


@functools.cache
def learner_programs(worker, seed) -> dict:
    """k -> what the grader measured of grouped_loss at k = None, 1, a middle k and L on the drawn
    memory configuration (its program sent by the worker, compiled and run here; the eight
    compilations in threads), its temporary memory at B + WIDER rows too, with the configuration
    and the float64 inputs it was given."""
    own_figures(seed)
    config = memory_config(seed)
    L, B, D = config
    ks = (None, 1, middle_k(L), L)
    w, x = make_inputs(seed, *config)
    closed = rebuilt(worker, [(L, B, D, k) for k in ks] + [(L, B + WIDER, D, k) for k in ks])
    at_b, wider = dict(zip(ks, closed[:len(ks)])), dict(zip(ks, closed[len(ks):]))
    for k in ks:  # the memory's growth per row is read from two traces of one function
        if program_data.primitive_sequence(at_b[k]) != program_data.primitive_sequence(wider[k]):
            fail(f"the programs sent for grouped_loss(k={k}) at B={B} and B={B + WIDER} rows are not the same "
                 "program at two sizes. Hint: grouped_loss should do the same operations whatever the batch size.")
    programs = {}
    for p in measure_all(at_b, *to_f32(w, x), list(ks), wider):
        k = p["k"]
        if p["outputs"] != 1:
            fail(f"grouped_loss(k={k}) returns {p['outputs']} values; expected one float32 scalar, "
                 "jnp.mean(x_out ** 2).")
        programs[k] = dict(p, config=config, w=w, x=x)
    return programs


def held_programs(worker, seed) -> dict:
    """learner_programs, each held to the loss (held_to_the_loss): what the technique checks read."""
    programs = learner_programs(worker, seed)
    for k, p in programs.items():
        held_to_the_loss(as_scalar(p["value"], f"grouped_loss(k={k})"), p["w"], p["x"], k)
    return programs


@functools.cache
def traced(worker, seed, k) -> dict:
    """The layout of the learner's program at the trace configuration, read here from the program
    the worker sent, which is run here on the trace inputs and held to the loss."""
    L, B, D = TRACE_CONFIG
    w, x = make_inputs([seed, 12], *TRACE_CONFIG)
    (closed,) = rebuilt(worker, [(L, B, D, k)])
    if len(closed.outvars) != 1:
        fail(f"grouped_loss(k={k}) returns {len(closed.outvars)} values; expected one float32 scalar, "
             "jnp.mean(x_out ** 2).")
    value = jax.jit(loss_of(closed))(*as_f32(w, x))
    held_to_the_loss(as_scalar(np.asarray(value), f"grouped_loss(k={k})"), w, x, k)
    return summary(closed, L, B, D)


def graded_jaxprs(worker, seed, baseline=False) -> list[tuple[int, int | None, dict]]:
    """(L, k, layout) for every k the grader grades (k=None only if baseline): the trace
    configuration's and the memory configuration's."""
    own_figures(seed)
    if baseline:
        return [(TRACE_CONFIG[0], None, traced(worker, seed, None)),
                (memory_config(seed)[0], None, held_programs(worker, seed)[None]["layout"])]
    out = [(TRACE_CONFIG[0], k, traced(worker, seed, k)) for k in TRACE_KS]
    out += [(p["config"][0], k, p["layout"]) for k, p in held_programs(worker, seed).items() if k is not None]
    # middle k first: at k = 1 or L several mistakes look alike, a middle k tells them apart
    return sorted(out, key=lambda item: item[1] in (1, item[0]))


def size_text(n: float) -> str:
    return f"{n / costs.MiB:.2f} MiB" if n >= costs.MiB else f"{n / 1024:.1f} KiB"


def curve_chart(yours: dict, asked: dict, title: str, per_row: dict | None = None, asked_per_row: dict | None = None) -> str:
    """A text bar chart, one row per k (None = no checkpoint): your program's temporary memory
    as a bar, the asked-for technique's figure beside it; then a line reading the curve, and
    what each k holds per batch row (what checkpointing changes)."""
    top = max(*yours.values(), *asked.values())
    rows = [title]
    for k, v in yours.items():
        label = "none" if k is None else str(k)
        rows.append(f"  k={label:>4}  {size_text(v):>10}  {'#' * max(1, round(30 * v / top)):<30}"
                    f"  (grouped checkpoint: {size_text(asked[k])})")
    ks = [k for k in yours if k is not None]
    L, mid = ks[-1], ks[1]
    rows.append(f"  k={mid} (near sqrt(L) = {math.sqrt(L):.3g}) against k=1: {yours[mid] / yours[1] - 1:+.0%}, "
                f"against k={L}: {yours[mid] / yours[L] - 1:+.0%}; k={L}, one checkpoint around everything, "
                f"against no checkpoint: {yours[L] / yours[None] - 1:+.0%}")
    if per_row is not None:
        rows.append("  per batch row (what the activations add): "
                    + ", ".join(f"k={'none' if k is None else k}: {per_row[k]:.0f} B ({asked_per_row[k]:.0f})"
                                for k in per_row) + " (grouped checkpoint in brackets)")
    return "\n".join(rows)


# ---- reading the layout the probes send ----

def describe_layout(checkpoints) -> str:
    counts = Counter((c["times"], c["per_run"]) for c in checkpoints)
    return "; ".join(f"{'a checkpoint' if n == 1 else f'{n} checkpoints each'} run {r} time(s) around {m} layer(s)"
                     for (r, m), n in counts.items())


# What a policy keeps, named for the learner; each was measured (saved residuals and
# memory_analysis of the grouped program) when the grader was written, and the message adds the
# figure measured on the learner's own program.
POLICY_SAVES = {
    "dots_saveable": "it saves the result of every x @ W in the group, so the backward pass keeps one "
                     "more (B, D) array per layer, and with k=1 as much memory as no checkpoint at all",
    "dots_with_no_batch_dims_saveable": "it saves the result of every x @ W in the group (a matmul without "
                                        "batch dimensions), one (B, D) array per layer",
    "everything_saveable": "it saves every intermediate value, so nothing is recomputed and the checkpoint "
                           "saves no memory at all",
}


def answer_int(answer: dict, what: str, hint: str = "") -> int:
    """What a learner function returned (a probe's answer()) as a Python int, or a failed check."""
    got = None if "value" in answer else f"{answer['type']} {answer['repr']}"
    return as_int(answer.get("value"), what, hint, got)


# ---- checks ----

@pytest.mark.points(2)
def test_loss_matches_float64_forward(worker, seed):
    """grouped_loss equals a float64 NumPy forward pass, for k=None, 1, a middle k and L."""
    for k, program in learner_programs(worker, seed).items():
        L, B, D = program["config"]
        got = as_scalar(program["value"], f"grouped_loss(k={k})")
        expected = np.mean(forward_np(program["w"], program["x"]) ** 2)
        assert_close(got, expected, f"grouped_loss(k={k}) with L={L}, B={B}, D={D}",
                     "Hint: L layers x <- x + tanh(x @ W[l]) in order, then jnp.mean(x_out ** 2).",
                     mistakes=loss_mistakes(program["w"], program["x"]),
                     rtol=float32_rtol(expected, own_float32_errors(seed)["loss"]))


@pytest.mark.points(2)
def test_gradient_matches_float64_gradient(worker, seed):
    """For k = None, 1, a middle k and L the gradient equals a float64 NumPy backward pass."""
    for k, program in learner_programs(worker, seed).items():
        L, B, D = program["config"]
        expected = gradient_np(program["w"], program["x"])
        # Dozens of residual layers can amplify float32's rounding beyond RTOL: the grader's own
        # float32 gradient says how far a right answer may be (numeric.float32_rtol).
        rtol = float32_rtol(expected, own_float32_errors(seed)["grad"])
        grads = program["grads"]
        if not isinstance(grads, dict) or "w" not in grads:
            fail(f"the gradient of grouped_loss(k={k}) with respect to params is {type(grads).__name__}, not "
                 "{'w': ...}. Hint: take params as the dict it is and index params['w'].")
        assert_close(grads["w"], expected, f"gradient of grouped_loss(k={k}) with respect to params['w'] (L={L})",
                     "Hint: checkpointing changes memory, never values: the groups must apply all L layers, "
                     "each with its own W[l], in order.",
                     mistakes=[(expected * B * D, "It is B * D times too large: the loss is summed, not averaged."),
                               (expected * D, "It is D times too large: the loss sums over the features.")],
                     rtol=rtol)


@pytest.mark.points(1)
def test_no_checkpoint_when_k_is_none(worker, seed):
    """With k=None the jaxpr holds no checkpoint (remat2) and the L layers run in a lax.scan."""
    for L, k, program in graded_jaxprs(worker, seed, baseline=True):
        checkpoints, total, copies = program["checkpoints"], program["total"], program["copies"]
        if checkpoints:
            fail(f"grouped_loss(k=None) holds {len(checkpoints)} jax.checkpoint (remat2) in its jaxpr; expected none: "
                 "k=None is the no-checkpointing baseline the memory curve is compared with. "
                 "Hint: for k=None, run the L layers with one lax.scan and nothing else.")
        if total != L:
            fail(f"grouped_loss(k=None) with L={L} applies the layer (its tanh) {total} times; expected {L}. "
                 "Hint: lax.scan over params['w'], one layer per step.")
        if copies > 1:
            fail(f"grouped_loss(k=None) holds {copies} copies of the layer in its jaxpr: the layers are unrolled "
                 "by a Python loop. Hint: lax.scan over params['w'] traces the layer once.")


@pytest.mark.points(3)
def test_one_checkpoint_per_group_inside_a_scan(worker, seed):
    """For every k graded (1 and L too), one checkpoint around k layers, run L/k times by a scan."""
    for L, k, program in graded_jaxprs(worker, seed):
        groups = L // k
        checkpoints, total, outside = program["checkpoints"], program["total"], program["outside"]
        head = f"grouped_loss(k={k}) with L={L}: expected one jax.checkpoint around {k} layer(s), run {groups} time(s) by a scan of length {groups}"
        found = describe_layout(checkpoints)
        if not checkpoints:
            fail(f"{head}; found no checkpoint at all (no remat2 in the jaxpr): nothing is recomputed, so memory "
                 "cannot go down. Hint: wrap the function that runs one group's k layers in jax.checkpoint"
                 f"{', for k=1 and k=L as well' if k in (1, L) else ''}.")
        if any(c["nested"] for c in checkpoints):
            fail(f"{head}; found a checkpoint inside another checkpoint ({found}): each layer inside the group is "
                 "checkpointed as well. Hint: one jax.checkpoint per group only; inside it the layers run as usual.")
        if total != L or outside:
            fail(f"{head}; the layer runs {total} times, {outside} of them outside any checkpoint ({found}). "
                 "Hint: every layer belongs to exactly one group, and each group runs inside its checkpoint.")
        if len(checkpoints) > 1:
            fail(f"{head}; found {len(checkpoints)} separate checkpoints in the program ({found}): a Python loop "
                 "unrolls them. Hint: reshape W to (L/k, k, D, D) and lax.scan over the groups.")
        (c,) = checkpoints
        if (c["times"], c["per_run"]) == (groups, k):
            continue
        if (c["times"], c["per_run"]) == (1, L):
            why = ("one checkpoint around the whole network whatever k is: the backward pass then recomputes all "
                   "layers and holds their activations at once, so nothing is saved. Hint: one checkpoint per group of k layers.")
        elif (c["times"], c["per_run"]) == (L, 1):
            why = ("a checkpoint on every layer whatever k is. Hint: the checkpointed function runs a whole group "
                   "of k layers (a scan over the group's k weights), not one layer.")
        elif (c["times"], c["per_run"]) == (k, groups):
            why = (f"the groups are the wrong way round: {k} groups of {groups} layers instead of {groups} groups of {k}. "
                   "Hint: reshape W to (L // k, k, D, D), scan over the first axis, and checkpoint the scan over the second.")
        else:
            why = "Hint: reshape W to (L // k, k, D, D); lax.scan over the groups; the body is a jax.checkpoint'ed scan over the group's k layers."
        fail(f"{head}; found {found}: {why}")


@pytest.mark.points(2)
def test_group_body_is_a_scan_over_its_k_layers(worker, seed):
    """Inside each checkpoint the group's k layers run in a lax.scan of length k, not a Python loop."""
    for L, k, program in graded_jaxprs(worker, seed):
        checkpoints = program["checkpoints"]
        if not checkpoints:
            fail(f"grouped_loss(k={k}) with L={L} holds no jax.checkpoint, so there is no group body to read. "
                 "Hint: the scan over the groups calls a jax.checkpoint'ed function that scans the group's k layers.")
        for c in checkpoints:
            if c["copies"] > 1:
                fail(f"grouped_loss(k={k}) with L={L}: the checkpointed group holds {c['copies']} copies of the layer: "
                     "a Python loop unrolls the group's layers. Hint: inside the checkpoint, lax.scan over the "
                     "group's (k, D, D) weights, so the layer is traced once.")
            if k > 1 and c["per_run"] == k and not any(k in lengths for lengths in c["inner_scans"]):
                fail(f"grouped_loss(k={k}) with L={L}: inside the checkpoint the layer is not in a lax.scan of length {k} "
                     f"(scans around it inside the checkpoint: {c['inner_scans']}). Hint: the checkpointed function "
                     "runs lax.scan over the group's k weights.")


@pytest.mark.points(2)
def test_checkpoint_policy_saves_nothing(worker, seed):
    """Every jax.checkpoint uses the default policy (save nothing): none that keeps the layers' values."""
    found_any = False
    for L, k, program in graded_jaxprs(worker, seed):
        recorded_ahead(lambda: own_residual_bytes(k, L, *(TRACE_CONFIG[1:] if L == TRACE_CONFIG[0] else
                                                         learner_programs(worker, seed)[k]["config"][1:])))
        for checkpoint in program["checkpoints"]:
            found_any = True
            if saves_nothing(checkpoint):
                continue
            name = checkpoint["policy"]
            B, D = TRACE_CONFIG[1:] if L == TRACE_CONFIG[0] else learner_programs(worker, seed)[k]["config"][1:]
            what = POLICY_SAVES.get(name, "it tells jax.checkpoint to keep values instead of recomputing them")
            try:
                extra = program["residual_bytes"] - own_residual_bytes(k, L, B, D)
                measured = (f" Measured on your program: the backward pass keeps {extra} bytes more than a checkpoint "
                            f"that saves nothing ({extra / (L * B * D * 4):.3g} (B, D) array(s) per layer).")
            except Deferred:  # the students' copy recorded no figure for this: the verdict without it
                measured = ""
            fail(f"grouped_loss(k={k}) with L={L}: jax.checkpoint(policy={name}): {what}.{measured} Hint: the exercise "
                 "asks for the default policy, which saves only each group's input: jax.checkpoint(group) with no policy.")
    if not found_any:
        fail("grouped_loss holds no jax.checkpoint for any k, so no policy saves nothing by choice: nothing is "
             "recomputed. Hint: wrap the function that runs one group's k layers in jax.checkpoint.")


def per_row(temp: float, wider: float) -> float:
    """Bytes a gradient program's temporary memory grows by per batch row (from B to B + WIDER)."""
    return (wider - temp) / WIDER


def memory_rows(worker, seed) -> tuple[dict, dict]:
    """k -> bytes per batch row: the learner's gradient and the grader's grouped checkpoint."""
    programs = held_programs(worker, seed)
    L, B, D = programs[1]["config"]
    own = own_figures(seed)
    yours = {k: per_row(p["temp"], p["temp_wider"]) for k, p in programs.items()}
    asked = {k: per_row(own[(L, B, D, k, True)], own[(L, B + WIDER, D, k, True)]) for k in programs}
    return yours, asked


def memory_verdict(worker, seed) -> str | None:
    """None when the learner's gradient holds, per batch row, what the grader's own grouped
    checkpoint holds for k = 1, middle and L (within MEMORY_RTOL), and besides that at most
    WEIGHT_BUFFERS weight-sized buffers more; else what is wrong."""
    programs = held_programs(worker, seed)
    L, B, D = programs[1]["config"]
    yours, asked = memory_rows(worker, seed)
    mid = middle_k(L)
    # `not <=`, so that a figure that is not a number (NaN) is wrong too
    bad = [k for k in (1, mid, L) if not abs(yours[k] - asked[k]) <= MEMORY_RTOL * asked[k]]
    # What does not grow with the batch: the difference at B rows that the growth per row does
    # not explain (a gradient without checkpoints holds more at B because it grows faster). Named
    # when the activations are right, or when it outweighs their difference even at B + WIDER
    # rows (an unrolled loop's memory is not linear in B: there the activations are the story).
    own = own_figures(seed)
    fixed = {k: programs[k]["temp"] - own[(L, B, D, k, True)] - (yours[k] - asked[k]) * B for k in (1, mid, L)}
    more = {k: n for k, n in fixed.items() if beyond_the_weights(own[(L, B, D, k, True)] + n, own[(L, B, D, k, True)], L, D)
            and (not bad or n > abs(yours[k] - asked[k]) * (B + WIDER))}
    if more:
        return (f"the gradient of grouped_loss, L={L} B={B} D={D}, holds memory that does not grow with the batch "
                "beyond what the grouped checkpoint holds: "
                + ", ".join(f"k={k}: {size_text(n)} more than the grader's own program" for k, n in more.items())
                + f", more than {WEIGHT_BUFFERS} copies of the weights ({size_text(L * D * D * 4)} each) would take. "
                "Hint: look for arrays your gradient keeps whatever the batch: copies of the weights or of their "
                "gradient, carried through the scan or kept alive beside the checkpoints.")
    if not bad:
        return None
    got = ", ".join(f"k={k}: {yours[k]:.0f} bytes (expected {asked[k]:.0f})" for k in (1, mid, L))
    head = (f"the gradient of grouped_loss, L={L} B={B} D={D}, holds other activations than the grouped checkpoint "
            f"the exercise asks for. What its temporary memory grows by per row of the batch (measured at B={B} and "
            f"B={B + WIDER}, within {MEMORY_RTOL:.0%} of the grader's own program): {got}; no checkpoint: "
            f"{asked[None]:.0f}.")
    if all(yours[k] >= (1 - MEMORY_RTOL) * asked[None] for k in (1, mid, L)):
        return (f"{head} No k saves memory against no checkpoint, as if there were no checkpoint at all (or one "
                "around the whole network whatever k is, or a policy that saves every value). "
                "Hint: one jax.checkpoint per group of k layers, with the default policy.")
    if all(abs(yours[k] - asked[1]) <= MEMORY_RTOL * asked[1] for k in (1, mid, L)):
        return (f"{head} Every k needs what k=1 needs, as with a checkpoint on every layer whatever k is. "
                "Hint: checkpoint a group's k layers as one function; inside it, no further checkpoint.")
    if yours[mid] > asked[mid] and yours[1] > asked[1]:
        return (f"{head} Your checkpoints keep more than each group's input (a remat policy that saves values, "
                "or activations computed outside the checkpoint). Hint: jax.checkpoint with no policy around a "
                "scan over the group's k layers.")
    return (f"{head} Hint: with one checkpoint per group of k layers, the backward pass holds the L/k group "
            "inputs plus one group's activations.")


def own_curve_if_right(worker, seed) -> dict | None:
    """k -> the temporary memory of the learner's own gradient at the memory configuration, when
    their grouped_loss is a grouped checkpoint the memory check accepts (it may hold buffers
    that do not grow with the batch, e.g. the weights' gradient, that the grader's does not);
    else None. A learner's temp_memory_bytes and best_group_size measure their own program."""
    try:
        right = memory_verdict(worker, seed) is None
    except (CheckFailed, Verdict):  # grouped_loss itself fails: the checks above say how
        return None
    return {k: p["temp"] for k, p in held_programs(worker, seed).items()} if right else None


@pytest.mark.points(3)
def test_gradient_memory_matches_the_grouped_checkpoint(worker, seed, note):
    """Measured: per batch row, the gradient holds what the grader's own grouped checkpoint holds, for k=1, middle, L."""
    programs = held_programs(worker, seed)
    L, B, D = programs[1]["config"]
    asked = {k: own_figures(seed)[(L, B, D, k, True)] for k in programs}
    yours = {k: p["temp"] for k, p in programs.items()}
    note(curve_chart(yours, asked, f"your measured curve: temp_size_in_bytes of jit(value_and_grad), L={L} B={B} D={D}",
                     *memory_rows(worker, seed)))
    verdict = memory_verdict(worker, seed)
    if verdict:
        fail(verdict)


@pytest.mark.points(2)
def test_temp_memory_bytes_matches_measurement(worker, seed):
    """temp_memory_bytes equals the grader's own measurement of the asked-for program (k=None, middle k)."""
    L, B, D = memory_config(seed)
    mid = middle_k(L)
    inputs = make_inputs([seed, 14], L, B, D)
    expected = own_figures(seed)
    for k in (None, mid):
        got = answer_int(worker.temp_memory_bytes(*to_f32(*inputs), k), f"temp_memory_bytes(k={k})",
                         "Hint: int(compiled.memory_analysis().temp_size_in_bytes), a number of bytes.")
        want = expected[(L, B, D, k)]
        recorded_ahead(lambda: own_memory_fields(L, B, D, k))
        if abs(got - want) <= MEMORY_RTOL * want:
            continue
        theirs = own_curve_if_right(worker, seed)  # another right grouped checkpoint, measured right
        if theirs is not None and abs(got - theirs[k]) <= MEMORY_RTOL * theirs[k]:
            continue
        what = "no checkpoint" if k is None else f"one checkpoint per group of {k} layers"
        head = (f"temp_memory_bytes(k={k}) with L={L} B={B} D={D}: expected about {want} bytes (the grader's own "
                f"gradient program with {what}, within {MEMORY_RTOL:.0%}), got {got}.")
        try:
            fields = own_memory_fields(L, B, D, k)
        except Deferred:  # the students' copy recorded no diagnosis of a wrong figure: the plain verdict below
            fields = {"peak": -1, "whole": -1, "forward": -1}
        if abs(got - fields["peak"]) <= MEMORY_RTOL * fields["peak"]:
            fail(f"{head} That is peak_memory_in_bytes, which on CPU hardly moves with k. "
                 "Hint: report memory_analysis().temp_size_in_bytes, the activations the program holds.")
        whole = fields["whole"]
        if abs(got - whole) <= MEMORY_RTOL * whole:
            fail(f"{head} That adds the arguments and outputs to the temporary memory. Hint: report temp_size_in_bytes alone.")
        forward = fields["forward"]
        if forward >= 0 and (got <= forward or abs(got - forward) <= MEMORY_RTOL * max(forward, 1)):
            fail(f"{head} That is about the forward pass's memory ({forward} bytes); checkpointing acts on what the "
                 "backward pass holds. Hint: compile jax.grad of grouped_loss with respect to params.")
        if k is not None and got >= (1 - MEMORY_RTOL) * expected[(L, B, D, None)]:
            fail(f"{head} That is as much as the gradient needs without any checkpoint ({expected[(L, B, D, None)]} "
                 "bytes) or more: the program you measure does not checkpoint its groups (or its checkpoint saves "
                 "every value). Hint: grouped_loss(k=k) needs one jax.checkpoint per group, and temp_memory_bytes "
                 "measures jax.grad of it.")
        fail(f"{head} Hint: jax.jit(jax.grad(partial(grouped_loss, k=k))).lower(params, x).compile()"
             ".memory_analysis().temp_size_in_bytes.")


@pytest.mark.points(3)
def test_best_group_size_is_the_measured_minimum(worker, seed):
    """best_group_size returns the least-memory k of the grader's own curve, on two shapes of one L."""
    configs = pair_configs(seed)
    curves = own_figures(seed)
    inputs = [to_f32(*make_inputs([seed, 15 + i], *cfg)) for i, cfg in enumerate(configs)]
    # The two searches are independent: the probe runs them side by side (compiling releases the GIL).
    answers = worker.best_group_size(inputs)
    if not isinstance(answers, list) or len(answers) != len(configs):
        fail(f"the process running your code sent back {type(answers).__name__} "
             f"{len(answers) if isinstance(answers, list) else ''} answers of best_group_size for "
             f"{len(configs)} configurations.".replace("  ", " "))
    for (L, B, D), answer in zip(configs, answers):
        got = answer_int(answer, f"best_group_size with L={L}", "Hint: return the group size k itself, not its memory.")
        if got < 1 or L % got:
            fail(f"best_group_size with L={L} returned {got}, which is not a divisor of L={L}. "
                 "Hint: try every k in 1..L with L % k == 0.")
        curve = {k: curves[(L, B, D, k)] for k in divisors(L)}
        least = min(curve.values())
        if curve[got] <= least * (1 + TIE_RTOL):
            continue
        theirs = None
        if own_curve_if_right(worker, seed) is not None:
            # their grouped_loss is another right grouped checkpoint: its own curve may have its least elsewhere
            programs = rebuilt(worker, [(L, B, D, k) for k in divisors(L)])
            with ThreadPoolExecutor(max_workers=len(programs)) as pool:
                temps = list(pool.map(lambda c: gradient_temp(c, L, B, D), programs))
            theirs = dict(zip(divisors(L), temps))
            bounded = not any(beyond_the_weights(theirs[k], curve[k], L, D) for k in curve)
            if bounded and theirs[got] <= min(theirs.values()) * (1 + TIE_RTOL):
                continue
        best = min(curve, key=curve.get)
        own_best = None if theirs is None else min(theirs, key=theirs.get)
        head = (f"best_group_size with L={L} B={B} D={D}: expected k={best} ({size_text(least)}, the least the grader "
                f"measured for one checkpoint per group"
                + (f"; your own grouped_loss's gradient needs the least at k={own_best}" if own_best not in (None, best)
                   else "") + f"), got k={got} ({size_text(curve[got])}).")
        near = lambda target: min(curve, key=lambda k: abs(k - target))  # noqa: E731
        formula = got in (near(math.sqrt(L)), near(math.sqrt(L / 2)), math.isqrt(L))
        other = [cfg for cfg in configs if cfg != (L, B, D) and min(divisors(L), key=lambda k: curves[(*cfg, k)]) == got]
        if not (formula or other):
            fail(f"{head} Hint: measure every divisor of L with temp_memory_bytes and return the k with the least.")
        why = []
        if formula:
            why.append("That is a formula in L: the divisor nearest sqrt(L) (or sqrt(L/2)), which a search over only a "
                       "few divisors, such as {1, ~sqrt(L), L}, finds too.")
        if other:
            why.append(f"It is the least for the other configuration graded with the same L (B={other[0][1]} "
                       f"D={other[0][2]}), not for this one: the answer does not follow the params and x it is given "
                       "(a formula, a table, or the memory of other arguments or of another program than the gradient).")
        fail(f"{head} {' '.join(why)} The optimum sqrt(L * a_in / a_layer) depends on what one layer saves against its "
             "input, and that changes with B and D. Hint: measure every divisor of L with temp_memory_bytes on the "
             "params and x given, and return the least.")
