"""Grader for Exercise 2: sqrt(L) grouped checkpointing.

Expected values come from the grader's own programs: a float64 NumPy forward pass, a plain JAX
gradient (a Python loop over the layers, no checkpoint), and `memory_analysis()` of programs
compiled here. The layout of checkpoints and scans is read from the traced jaxpr.
"""

import functools
import math
from collections import Counter
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from graders import jaxpr, memory
from graders.learner import fail
from graders.numeric import as_int, as_scalar, assert_close, rng

# (L, B, D) of the value checks: every axis distinct and small (values do not need big shapes).
LOSS_CONFIGS = ((7, 5, 3), (10, 4, 6))
GROUPED_LOSS_CONFIG, GROUPED_LOSS_K = (12, 5, 7), 3
GRAD_CONFIG, GRAD_KS = (16, 5, 3), (1, 4, 16)  # k = 1, sqrt(L), L
# Layout check: k and L/k differ, so groups taken the wrong way round (k groups of L/k) show.
TRACE_CONFIG, TRACE_KS = (24, 3, 2), (4, 8)

# Memory checks. L = 64 for the sqrt(L) lesson. temp_size_in_bytes does not depend on the values
# and the compile time hardly on B and D, so B and D are the smallest tried (from 3x5 up to
# 256x256) where the lesson shows with a wide margin. Measured here (JAX 0.12.0.1, CPU), bytes of
# the gradient's temp_size_in_bytes, for the reference solution:
#   L=64 B=6 D=4:  none 13060 | k=1 6916 | 2 4804 | 4 3908 | 8 4420 | 16 6596 | 32 11524 | 64 13124
# so k=8 (= sqrt L) < k=1 and < k=64, k=64 ~ no checkpoint, and the least is k=4, not isqrt(64)=8:
# one layer saves x @ W and tanh(.), more than its input, so k* = sqrt(L a_in / a_layer) < sqrt(L).
# (For comparison B=D=256: none 33.3 MiB, k=1 17.3, k=4 9.3, k=8 11.3, k=64 33.3 -- the same shape.)
MEMORY_CONFIG, SQRT_K = (64, 6, 4), 8
# A second configuration whose optimum differs and is not a power of two; L=27 has only four
# divisors, so finding its optimum compiles four gradients (L=36 or 48 would show it too, at 9-10):
#   L=27 B=6 D=4:  none 6020 | k=1 3396 | 3 3012 | 9 4356 | 27 6084
#   (least: k=3; isqrt(27) = 5 is not even a divisor; the only power of two, k=1, loses by 11%)
BEST_CONFIGS = (MEMORY_CONFIG, (27, 6, 4))
# Two measurements of one program agree to the byte; value_and_grad instead of grad adds ~40 bytes.
MEMORY_RTOL = 0.02
# "k=L saves nothing": within 5% of the no-checkpoint program (measured: +0.5%).
SAVES_NOTHING = 0.95


def divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def make_inputs(seed: int, L: int, B: int, D: int):
    """float64 weights (L, D, D) scaled so tanh stays out of saturation, and a batch (B, D)."""
    r = rng(seed)
    return r.normal(size=(L, D, D)) / np.sqrt(D), r.normal(size=(B, D))


def as_f32(w, x):
    return {"w": jnp.asarray(w, jnp.float32)}, jnp.asarray(x, jnp.float32)


def forward_np(w, x, residual=True, transpose=False):
    for layer_w in w:
        h = np.tanh(x @ (layer_w.T if transpose else layer_w))
        x = x + h if residual else h
    return x


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


def plain_loss(params, x):
    """The grader's own loss: a Python loop over the layers, no scan and no checkpoint."""
    for layer in range(params["w"].shape[0]):
        x = x + jnp.tanh(x @ params["w"][layer])
    return jnp.mean(x**2)


def plain_scan_loss(params, x):
    """The grader's own no-checkpoint program for the memory baseline (a scan, as k=None is)."""
    x, _ = jax.lax.scan(lambda x, w: (x + jnp.tanh(x @ w), None), x, params["w"])
    return jnp.mean(x**2)


# ---- memory, measured by the grader; cached so each program is compiled once per grading ----

def zeros_inputs(L, B, D):
    return {"w": jnp.zeros((L, D, D), jnp.float32)}, jnp.zeros((B, D), jnp.float32)


@functools.cache
def learner_stats(sol, L, B, D, k):
    """memory_analysis() of jit(grad(sol.grouped_loss(., k=k))) at shapes (L, B, D)."""
    fn = jax.grad(partial(sol.grouped_loss, k=k))
    return memory.compile_fn(fn, *zeros_inputs(L, B, D)).memory_analysis()


def learner_temp(sol, L, B, D, k) -> int:
    return int(learner_stats(sol, L, B, D, k).temp_size_in_bytes)


@functools.cache
def plain_temp(L, B, D) -> int:
    return memory.temp_bytes(jax.grad(plain_scan_loss), *zeros_inputs(L, B, D))


def size_text(n: float) -> str:
    return f"{n / memory.MiB:.2f} MiB" if n >= memory.MiB else f"{n / 1024:.1f} KiB"


def curve_chart(curve: dict, title: str) -> str:
    """A text bar chart: one row per k (None = no checkpoint), bar length proportional to the
    temporary memory, and a last line reading it: where the least is, against sqrt(L)."""
    top = max(curve.values())
    least = min(v for k, v in curve.items() if k is not None)
    n_layers = max(k for k in curve if k is not None)
    best = [k for k, v in curve.items() if k is not None and v == least]
    rows = [title]
    for k, v in curve.items():
        label = "none" if k is None else str(k)
        mark = "  <- least" if k is not None and v == least else ""
        rows.append(f"  k={label:>4}  {size_text(v):>10}  {'#' * max(1, round(30 * v / top))}{mark}")
    if None in curve:
        change = curve[n_layers] / curve[None] - 1
        rows.append(f"  least at k={best[0]} (sqrt(L) = {math.sqrt(n_layers):g}); k={n_layers}, one checkpoint "
                    f"around everything, against no checkpoint: {change:+.1%}")
    return "\n".join(rows)


# ---- reading the traced program ----

def runs(outer) -> int:
    """How many times an equation runs: the product of the lengths of the scans around it."""
    return math.prod(e.params["length"] for e in outer if jaxpr.is_a(e, "scan"))


def layout(program):
    """The checkpoints (eqn, times run, layers per run, nested in another checkpoint?), and how
    many layer applications (tanh) run in total and outside every checkpoint."""
    eqns = list(jaxpr.walk_nested(program))
    layers = [outer for e, outer in eqns if e.primitive.name == "tanh"]
    checkpoints = []
    for eqn, outer in eqns:
        if jaxpr.is_a(eqn, "checkpoint"):
            per_run = sum(runs(o[next(i for i, a in enumerate(o) if a is eqn) + 1:])
                          for o in layers if any(a is eqn for a in o))
            checkpoints.append((runs(outer), per_run, any(jaxpr.is_a(e, "checkpoint") for e in outer)))
    total = sum(runs(o) for o in layers)
    outside = sum(runs(o) for o in layers if not any(jaxpr.is_a(e, "checkpoint") for e in o))
    return checkpoints, total, outside, len(layers)


def describe_layout(checkpoints) -> str:
    counts = Counter((r, m) for r, m, _ in checkpoints)
    return "; ".join(f"{'a checkpoint' if n == 1 else f'{n} checkpoints each'} run {r} time(s) around {m} layer(s)"
                     for (r, m), n in counts.items())


# ---- checks ----

@pytest.mark.points(2)
def test_loss_matches_float64_forward(sol):
    """grouped_loss equals a float64 NumPy forward pass, for k=None on two shapes and for a k."""
    cases = [(cfg, None) for cfg in LOSS_CONFIGS] + [(GROUPED_LOSS_CONFIG, GROUPED_LOSS_K)]
    for seed, ((L, B, D), k) in enumerate(cases, start=1):
        w, x = make_inputs(seed, L, B, D)
        got = as_scalar(sol.grouped_loss(*as_f32(w, x), k=k), f"grouped_loss(k={k})")
        assert_close(got, np.mean(forward_np(w, x) ** 2), f"grouped_loss(k={k}) with L={L}, B={B}, D={D}",
                     "Hint: L layers x <- x + tanh(x @ W[l]) in order, then jnp.mean(x_out ** 2).",
                     mistakes=loss_mistakes(w, x))


@pytest.mark.points(3)
def test_gradient_matches_no_checkpoint_gradient(sol):
    """For k = 1, sqrt(L) and L the gradient equals the plain no-checkpoint gradient."""
    L, B, D = GRAD_CONFIG
    params, x = as_f32(*make_inputs(11, L, B, D))
    expected = np.asarray(jax.jit(jax.grad(plain_loss))(params, x)["w"], np.float64)
    for k in GRAD_KS:
        got = jax.jit(jax.grad(partial(sol.grouped_loss, k=k)))(params, x)["w"]
        assert_close(got, expected, f"gradient of grouped_loss(k={k}) with respect to params['w'] (L={L})",
                     "Hint: checkpointing changes memory, never values: the groups must apply all L layers, "
                     "each with its own W[l], in order.",
                     mistakes=[(expected * B * D, "It is B * D times too large: the loss is summed, not averaged."),
                               (expected * D, "It is D times too large: the loss sums over the features.")])


@pytest.mark.points(1)
def test_no_checkpoint_when_k_is_none(sol):
    """With k=None the jaxpr holds no checkpoint (remat2) and the L layers run in a lax.scan."""
    L, B, D = TRACE_CONFIG
    checkpoints, total, _, copies = layout(jaxpr.trace(partial(sol.grouped_loss, k=None), *as_f32(*make_inputs(12, L, B, D))))
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
def test_one_checkpoint_per_group_inside_a_scan(sol):
    """For a k, one checkpoint around k layers, run L/k times by a scan over the groups."""
    L, B, D = TRACE_CONFIG
    inputs = as_f32(*make_inputs(13, L, B, D))
    for k in TRACE_KS:
        groups = L // k
        checkpoints, total, outside, _ = layout(jaxpr.trace(partial(sol.grouped_loss, k=k), *inputs))
        head = f"grouped_loss(k={k}) with L={L}: expected one jax.checkpoint around {k} layers, run {groups} times by a scan of length {groups}"
        found = describe_layout(checkpoints)
        if not checkpoints:
            fail(f"{head}; found no checkpoint at all (no remat2 in the jaxpr): nothing is recomputed, so memory "
                 "cannot go down. Hint: wrap the function that runs one group's k layers in jax.checkpoint.")
        if any(nested for *_, nested in checkpoints):
            fail(f"{head}; found a checkpoint inside another checkpoint ({found}): each layer inside the group is "
                 "checkpointed as well. Hint: one jax.checkpoint per group only; inside it the layers run as usual.")
        if total != L or outside:
            fail(f"{head}; the layer runs {total} times, {outside} of them outside any checkpoint ({found}). "
                 "Hint: every layer belongs to exactly one group, and each group runs inside its checkpoint.")
        if len(checkpoints) > 1:
            fail(f"{head}; found {len(checkpoints)} separate checkpoints in the program ({found}): a Python loop "
                 "unrolls them. Hint: reshape W to (L/k, k, D, D) and lax.scan over the groups.")
        (times, per_run, _), = checkpoints
        if (times, per_run) == (groups, k):
            continue
        if (times, per_run) == (1, L):
            why = ("one checkpoint around the whole network whatever k is: the backward pass then recomputes all "
                   "layers and holds their activations at once, so nothing is saved. Hint: one checkpoint per group of k layers.")
        elif (times, per_run) == (L, 1):
            why = ("a checkpoint on every layer whatever k is. Hint: the checkpointed function runs a whole group "
                   "of k layers (a scan over the group's k weights), not one layer.")
        elif (times, per_run) == (k, groups):
            why = (f"the groups are the wrong way round: {k} groups of {groups} layers instead of {groups} groups of {k}. "
                   "Hint: reshape W to (L // k, k, D, D), scan over the first axis, and checkpoint the scan over the second.")
        else:
            why = "Hint: reshape W to (L // k, k, D, D); lax.scan over the groups; the body is a jax.checkpoint'ed scan over the group's k layers."
        fail(f"{head}; found {found}: {why}")


@pytest.mark.points(3)
def test_sqrt_group_uses_less_memory_than_k1_and_kL(sol, note):
    """Measured for L=64: k=sqrt(L) needs less temporary memory than k=1 and than k=L."""
    L, B, D = MEMORY_CONFIG
    curve = {k: learner_temp(sol, L, B, D, k) for k in [None, *divisors(L)]}
    note(curve_chart(curve, f"your measured curve: temp_size_in_bytes of the gradient, L={L} B={B} D={D}"))
    m1, ms, mL, none = curve[1], curve[SQRT_K], curve[L], curve[None]
    if ms < m1 and ms < mL:
        return
    got = f"k=1 {size_text(m1)}, k={SQRT_K} {size_text(ms)}, k={L} {size_text(mL)}, no checkpoint {size_text(none)}"
    values = [curve[k] for k in divisors(L)]
    if all(v >= SAVES_NOTHING * none for v in values):
        fail(f"expected k={SQRT_K} (= sqrt L) to need less temporary memory than k=1 and k={L}; got {got}: no k "
             "saves memory against no checkpointing, as if there were no checkpoint at all, or one checkpoint around "
             "the whole network whatever k is. Hint: one jax.checkpoint per group of k layers, inside a lax.scan over the groups.")
    if all(abs(v - m1) <= 0.05 * m1 for v in values):
        fail(f"expected k={SQRT_K} (= sqrt L) to need less temporary memory than k=1 and k={L}; got {got}: every k "
             "uses what k=1 uses, as with a checkpoint on every layer whatever k is (or on each layer inside "
             "the group). Hint: checkpoint a group's k layers as one function; inside it, no further checkpoint.")
    fail(f"expected k={SQRT_K} (= sqrt L) to need less temporary memory than k=1 and k={L}; got {got}. "
         "Hint: with a checkpoint per group, the backward pass holds L/k group inputs plus one group's activations.")


@pytest.mark.points(1)
def test_whole_network_checkpoint_saves_nothing(sol):
    """Measured for L=64: k=L (one checkpoint around everything) needs as much as no checkpoint."""
    L, B, D = MEMORY_CONFIG
    got, baseline = learner_temp(sol, L, B, D, L), plain_temp(L, B, D)
    if got >= SAVES_NOTHING * baseline:
        return
    fail(f"grouped_loss(k={L}) needs {size_text(got)} of temporary memory, but the grader's own program without any "
         f"checkpoint needs {size_text(baseline)}. One checkpoint around all {L} layers cannot save that: the "
         "backward pass recomputes the whole network and holds all its activations again. Your k=L checkpoints "
         "smaller pieces (a checkpoint on every layer whatever k is, or groups taken the wrong way round?). "
         "Hint: k=L means one group of all L layers.")


@pytest.mark.points(2)
def test_temp_memory_bytes_matches_measurement(sol):
    """temp_memory_bytes returns temp_size_in_bytes of the compiled gradient (k=None and k=4, L=64)."""
    L, B, D = MEMORY_CONFIG
    params, x = as_f32(*make_inputs(14, L, B, D))
    for k in (None, 4):
        got = as_int(sol.temp_memory_bytes(params, x, k), f"temp_memory_bytes(k={k})",
                     "Hint: int(compiled.memory_analysis().temp_size_in_bytes), a number of bytes.")
        stats = learner_stats(sol, L, B, D, k)
        expected = int(stats.temp_size_in_bytes)
        if abs(got - expected) <= MEMORY_RTOL * expected:
            continue
        head = f"temp_memory_bytes(k={k}) with L={L} B={B} D={D}: expected {expected} bytes (the grader's measurement), got {got}."
        if got == int(stats.peak_memory_in_bytes):
            fail(f"{head} That is peak_memory_in_bytes, which on CPU hardly moves with k. "
                 "Hint: report memory_analysis().temp_size_in_bytes, the activations the program holds.")
        if got == stats.temp_size_in_bytes + stats.argument_size_in_bytes + stats.output_size_in_bytes:
            fail(f"{head} That adds the arguments and outputs to the temporary memory. Hint: report temp_size_in_bytes alone.")
        forward = memory.temp_bytes(partial(sol.grouped_loss, k=k), params, x)
        if got == forward:
            fail(f"{head} That is the forward pass's memory; checkpointing acts on what the backward pass holds. "
                 "Hint: compile jax.grad of grouped_loss with respect to params.")
        fail(f"{head} Hint: jax.jit(jax.grad(partial(grouped_loss, k=k))).lower(params, x).compile()"
             ".memory_analysis().temp_size_in_bytes.")


@pytest.mark.points(3)
def test_best_group_size_is_the_measured_minimum(sol):
    """best_group_size returns a divisor of L with the least measured memory, on two configurations."""
    for seed, (L, B, D) in enumerate(BEST_CONFIGS, start=15):
        got = as_int(sol.best_group_size(*as_f32(*make_inputs(seed, L, B, D))), f"best_group_size with L={L}",
                     "Hint: return the group size k itself, not its memory.")
        if got < 1 or L % got:
            fail(f"best_group_size with L={L} returned {got}, which is not a divisor of L={L}. "
                 "Hint: try every k in 1..L with L % k == 0.")
        curve = {k: learner_temp(sol, L, B, D, k) for k in divisors(L)}
        least = min(curve.values())
        if curve[got] <= least:
            continue
        best = min(curve, key=curve.get)
        head = (f"best_group_size with L={L} B={B} D={D}: expected k={best} ({size_text(least)}, the least measured), "
                f"got k={got} ({size_text(curve[got])}).")
        powers = [k for k in curve if k & (k - 1) == 0]
        if got == math.isqrt(L):
            fail(f"{head} That is isqrt(L), the textbook guess: the optimum is sqrt(L * a_in / a_layer), and here one "
                 "layer saves more than its input (x @ W and tanh), so it lies below sqrt(L). "
                 "Hint: measure every divisor with temp_memory_bytes and take the least.")
        if best not in powers and got == min(powers, key=curve.get):
            fail(f"{head} That is the best power of two, but k={best} divides L={L} too. "
                 "Hint: try every divisor of L, not only 1, 2, 4, ...")
        fail(f"{head} Hint: measure every divisor of L with temp_memory_bytes and return the k with the least.")
