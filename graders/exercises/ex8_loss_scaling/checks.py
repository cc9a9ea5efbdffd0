"""Grader for Exercise 8: dynamic loss scaling for fp16.

The checks never call the learner's code: graders/exercises/ex8_loss_scaling/probes.py does, and hands back
plain data (numbers, float64 arrays, dtype names) and the programs of scaled_grads and of the
training loop (graders/kit/program.py), which are rebuilt, read and run here: the training runs,
the loop's sizes and what one step of it does on its own are the grader's own runs of the
learner's program, and each program is held to the grader's values before its technique is
judged (issue 31). Expected values come from the grader's own computations:
float64 NumPy gradients of the model, the grader's own JAX copy of the fp16 model (to measure what
fp16 does to the gradients), a Python step-by-step simulation of the scale rule, and a Python loop
of training steps with an explicit `if` for the skip. The rule's states, the trees given to
all_finite and the training loop's starting counters are drawn from the grading seed.
"""

import secrets
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from graders import settings
from graders.kit import figure_store, jaxpr, program as program_data
from graders.kit.expected import expected, or_else, recorded_ahead
from graders.kit.verdicts import fail
from graders.kit.numeric import as_array, assert_close, fmt, is_close, rng
from graders.exercises.ex8_loss_scaling.probes import (IN_PROCESS, KEYS, equations, first_steps, grads_reading,
                                                        live_program, lowered_size, program_summary, read_value, runs)

# This judge's nonce, in its own process's probes module: a probe that finds it runs in this
# process (no --sandbox) and hands over the learner's jitted scaled_grads (probes.IN_PROCESS).
IN_PROCESS.setdefault("judge", secrets.token_hex(16))

# N is large so that one example's share of the loss (LOSS_WEIGHT / (N*K)) lies deep in fp16's
# subnormal range; D, H, K are small to keep compiles short; every axis has a distinct size.
N, D, H, K = 384, 5, 24, 2
LOSS_WEIGHT = 5e-5  # the given model's weight (part of the model the exercise fixes)
F16_TINY = float(np.finfo(np.float16).tiny)

# At 2^15 the only error left is fp16's rounding in the forward pass (~4e-4 relative here). A
# right solution runs the very fp16 program the grader does: on 25 data sets (seeds 20-44) its
# error was 1.00x the grader's own, with the scale applied as `loss * scale`, `scale * loss` or a
# vjp's cotangent, and unscaled by `/ scale` or `* (1 / scale)`; unscaling in bfloat16 (8 bits of
# mantissa against fp16's 11) was 2.95x to 6.7x. So a right error is at most twice the grader's
# own, measured on the same data at grading time (the chapter's bound, 1%, is 25x it).
ERR_SLACK = 2.0
# The data sets of scaled_grads' checks, drawn by the grading seed (grad_seeds), so that the
# students' copy, which holds the public seed's expected gradients, holds no other grading's.
# UNDERFLOW_SETS have clear margins (measured over seeds 20-329 with the grader's own program;
# tests/test_ex8_grader.py holds each to it): fp16 loses at least 9% of the entries at scale 1,
# and overflows from 2^31 on, so 2^32 overflows with room to spare (many data sets do not).
UNDERFLOW_SETS = (22, 32, 61, 66, 70, 82, 90, 120, 140, 152, 163, 183, 184, 206, 214, 223, 248, 252, 257, 271,
                  302, 310, 318, 326)
PRECISION_SETS = tuple(range(20, 45))  # the data sets ERR_SLACK was measured on
UNDERFLOW_SHARE = 0.09
TRACE_SEED, TRAIN_SEED = 25, 31
# Training: Adam with a drawn learning rate (so that an optimizer of the learner's own, instead
# of the one given, fails), a scale far too large to start with, and enough steps to grow it once
# at the default period of 50 after the first skips. From 2^34 the loss halves in 64 steps for
# every rate drawn (measured: to 0.47 of the first finite step's loss at 8e-3, 0.39 at 2e-2).
LR_RANGE = (8e-3, 2e-2)
STEPS = 64
PERIOD = 50  # dyn_scale_step's default period, which train_fp16_dynamic uses
TOO_LARGE = 2.0 ** 34   # overflows for the first 3 steps on this data
HOPELESS = 2.0 ** 100   # still overflows after STEPS halvings: every step is skipped
# From 2^31 (finite on this data) with the counter at PERIOD - 1, the first step grows the scale
# to 2^32, which overflows at step 1: a skip after an update, with Adam's moments non-zero.
AFTER_GROWTH = (2.0 ** 31, PERIOD - 1)
# After training, against the simulation: both sides run the same fp16 model, but XLA fuses
# each program its own way, so fp16 roundings differ a little and Adam carries them along
# (measured for correct solutions: parameters 5.8e-5, losses 1.6e-5 relative to the largest).
# Keeping the optimizer state changed on the skipped steps moves them by 1.4e-2 and 6.7e-2.
PARAM_RTOL = 1e-3
LOSS_RTOL = 1e-3
# A scale divided by a factor that is not a power of two (3, 1.5) rounds in float32; written as
# `scale * (1 / factor)` it may land one ulp (6e-8 relative) away. A wrong rule is off by the factor.
SCALE_RTOL = 1e-6

# Is the loop one loop? First traced for 2 and 3 steps, which costs little even when every step
# is unrolled in Python; then lowered (not compiled) for 16 and 32 steps. A scan with unroll=k
# holds k + (steps mod k) copies of its step, so from 16 to 32 steps its program grows by less
# than half for any k up to 16; unroll=True (a copy per step) doubles it (measured: 4669 -> 9251
# lines, the reference 394 -> 394) and took 165 s to compile at 64 steps, against 1.8 s.
SMALL_STEPS = (2, 3)
LOWERED_STEPS = (16, 32)
UNROLL_GROWTH = 1.5


def draw(seed: int, topic: int) -> np.random.Generator:
    """A generator for one topic of the grading seed's draw (the topics are independent)."""
    return np.random.default_rng((seed, 8, topic))


def grad_seeds() -> tuple[int, int]:
    """(an underflow data set, another data set) for the scaled_grads checks, drawn from the grading seed."""
    r = draw(settings.seed(), 10)
    first = int(r.choice(UNDERFLOW_SETS))
    return first, int(r.choice([s for s in PRECISION_SETS if s != first]))


# ---------------------------------------------------------------- data and the grader's own model

def problem(seed: int):
    """float64 parameters (a dict like the learner's), inputs and targets."""
    r = rng(seed)
    x = r.uniform(-2, 2, size=(N, D))
    y = np.sin(x @ r.normal(size=(D, K)))
    params = {"w1": r.normal(size=(D, H)) / np.sqrt(D), "b1": r.normal(size=H) * 0.1,
              "w2": r.normal(size=(H, K)) / np.sqrt(H), "b2": r.normal(size=K) * 0.1}
    return params, x, y


def f32(tree):
    return jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), tree)


@expected
def grads_np(p, x, y):
    """Gradients of LOSS_WEIGHT * mean((tanh(x w1 + b1) w2 + b2 - y)^2), float64."""
    h = np.tanh(x @ p["w1"] + p["b1"])
    d_out = LOSS_WEIGHT * 2 * (h @ p["w2"] + p["b2"] - y) / y.size
    d_pre = (d_out @ p["w2"].T) * (1 - h ** 2)
    return {"w1": x.T @ d_pre, "b1": d_pre.sum(0), "w2": h.T @ d_out, "b2": d_out.sum(0)}


def own_fp16_loss(p, x, y):
    h = jnp.tanh(x.astype(jnp.float16) @ p["w1"].astype(jnp.float16) + p["b1"].astype(jnp.float16))
    out = h @ p["w2"].astype(jnp.float16) + p["b2"].astype(jnp.float16)
    return LOSS_WEIGHT * jnp.mean((out.astype(jnp.float32) - y) ** 2)


@jax.jit
def own_step(p, x, y, scale):
    """The grader's loss-scaled gradients (fp16 compute), whether they are finite, and the loss."""
    loss, g = jax.value_and_grad(lambda q: own_fp16_loss(q, x, y) * scale)(p)
    g = jax.tree.map(lambda t: t / scale, g)
    return g, jnp.all(jnp.array([jnp.all(jnp.isfinite(t)) for t in jax.tree.leaves(g)])), loss / scale


def flat(tree) -> np.ndarray:
    return np.concatenate([np.asarray(tree[k], np.float64).ravel() for k in KEYS])


def zero_share(got, true) -> float:
    """Share of the entries that came back exactly 0 where the float64 gradient is not."""
    return float(np.mean((got == 0) & (true != 0)))


def rel_err(got, true) -> float:
    return float(np.linalg.norm(got - true) / np.linalg.norm(true)) if np.all(np.isfinite(got)) else np.inf


def pow2(scale: float) -> str:
    return f"2^{np.log2(scale):g}"


# ---------------------------------------------------------------- reading the learner's results

def scale_state(value) -> tuple[float, int, object, object]:
    """(scale, good_steps, scale dtype, good_steps dtype) from a probe's reading of a DynScale."""
    scale, good, s_dtype, g_dtype = value
    return scale, good, jnp.dtype(s_dtype), jnp.dtype(g_dtype)


# ---------------------------------------------------------------- the scale rule, simulated

@expected
def rule(scale, good, finite, period, factor, min_scale):
    """One step of the rule in float32, as the learner's scale is stored."""
    scale, factor = np.float32(scale), np.float32(factor)
    if not finite:
        return float(max(np.float32(scale / factor), np.float32(min_scale))), 0
    if good + 1 >= period:
        return float(np.float32(scale * factor)), 0
    return float(scale), good + 1


def same_scale(got: float, expected: float) -> bool:
    return bool(abs(got - expected) <= SCALE_RTOL * abs(expected))


def same_state(got: tuple, expected: tuple) -> bool:
    return same_scale(got[0], expected[0]) and got[1] == expected[1]


def check_transitions(worker, flags, scale, period, factor, min_scale, good=0):
    """Feed the learner's dyn_scale_step each of the simulation's states in turn, so a message
    names the one transition that went wrong."""
    start = (scale, good)
    for i, finite in enumerate(flags):
        expected = rule(scale, good, finite, period, factor, min_scale)
        call = (f"dyn_scale_step(DynScale({scale:g}, {good}), finite={finite}, period={period}, factor={factor}, "
                f"min_scale={min_scale})")
        got_scale, got_good, s_dtype, _ = scale_state(
            worker.dyn_scale_step(call, scale, good, finite, period, factor, min_scale))
        if not same_state((got_scale, got_good), expected):
            fail(f"{call} (step {i} of the sequence {[int(f) for f in flags]} from DynScale({start[0]:g}, {start[1]})) "
                 f"returned ({got_scale:g}, {got_good}), expected ({expected[0]:g}, {expected[1]}). "
                 + transition_mistake(worker, scale, good, finite, period, factor, min_scale,
                                      got_scale, got_good, expected, s_dtype))
        scale, good = expected


def grows_one_step_late(worker, scale, period, factor, min_scale) -> bool:
    """Whether the learner's rule grows from a counter already at `period`: good_steps, not
    good_steps + 1, compared with the period."""
    call = f"dyn_scale_step(DynScale({scale:g}, {period}), finite=True, period={period})"
    got = scale_state(worker.dyn_scale_step(call, scale, period, True, period, factor, min_scale))
    return same_scale(got[0], scale * factor)


def transition_mistake(worker, scale, good, finite, period, factor, min_scale, got_scale, got_good, expected, s_dtype):
    if not np.isfinite(got_scale) or s_dtype == jnp.float16:
        return ("The scale is held in fp16, where anything above 65504 overflows to inf. "
                "Hint: keep DynScale.scale float32.")
    if finite and good + 1 < period and same_scale(got_scale, scale * factor):
        return (f"That is growing on every finite step: the period is ignored. Grow only when good_steps + 1 "
                f"reaches period={period}.")
    if finite and good + 1 >= period and same_scale(got_scale, scale):
        late = got_good == period and grows_one_step_late(worker, scale, period, factor, min_scale)
        return (f"The scale did not grow although this is finite step number {period} in a row"
                + (" (it grows one step later: good_steps is compared with the period instead of good_steps + 1)"
                   if late else " (is the period hard-coded to 50?)" if period != 50 else "") + ". Hint: compare "
                "good_steps + 1 with the `period` argument.")
    if finite and good + 1 >= period and same_scale(got_scale, scale * factor) and got_good != 0:
        return "The scale grew, but the counter was not reset: after growing, good_steps goes back to 0."
    if finite and same_scale(got_scale, scale) and got_good != good + 1:
        return "A finite step adds one to good_steps."
    if not finite and got_scale < min_scale * (1 - SCALE_RTOL):
        return f"That is shrinking below min_scale={min_scale}: the scale is max(scale / factor, min_scale)."
    if not finite and same_scale(got_scale, expected[0]) and got_good != 0:
        return "The scale shrank, but the counter was not reset: after an overflow, good_steps goes to 0."
    if not finite and got_scale >= scale and scale > min_scale:
        return (f"On an overflow the scale must shrink: scale / factor (factor={factor}), at least min_scale"
                + (", also when the counter is one step from growing" if good + 1 >= period else "") + ".")
    return ("Hint: finite -> count, grow by factor at period, reset; not finite -> max(scale / factor, min_scale), "
            "reset.")


def rule_draw(seed: int, topic: int):
    """A drawn configuration of the rule: (period, factor, min_scale, first counter > 0, first
    scale); the scale is min_scale times a power of the factor times 1, 1.25 or 1.75, so that
    shrinking reaches min_scale exactly or is clamped to it."""
    r = draw(seed, topic)
    period = int(r.integers(3, 8))
    factor = float(r.choice((2.0, 4.0, 3.0, 1.5)))
    min_scale = float(r.choice((1.0, 2.0, 3.0, 0.5)))
    scale = float(np.float32(min_scale * factor ** int(r.integers(2, 6)) * float(r.choice((1.0, 1.25, 1.75)))))
    return period, factor, min_scale, int(r.integers(1, period)), scale, r


def overflow_at_every_count(period: int, good: int, order) -> list[bool]:
    """Flags that, from a counter at `good`, end in an overflow at every counter value of `order`
    in turn (0 to period - 1: the last one is where a finite step would grow the scale)."""
    flags = []
    for count in order:
        if good > count:
            flags.append(False)
            good = 0
        flags += [True] * (count - good) + [False]
        good = 0
    return flags


def floor_flags(scale, good, period, factor, min_scale) -> list[bool]:
    """Overflows from (scale, good) down to min_scale, and two more at the floor."""
    flags = []
    while scale > min_scale:
        flags.append(False)
        scale, good = rule(scale, good, False, period, factor, min_scale)
    return flags + [False, False]


# ---------------------------------------------------------------- dyn_scale_step

@pytest.mark.points(2)
def test_scale_grows_exactly_at_period(worker, seed):
    """Finite steps count up, from any counter; at `period` the scale grows by `factor` and the counter resets."""
    check_transitions(worker, [True] * 7, 2.0 ** 10, period=3, factor=2.0, min_scale=1.0)
    check_transitions(worker, [True] * 11, 1.5, period=5, factor=3.0, min_scale=1.0)
    check_transitions(worker, [True] * 3, 4.0, period=1, factor=2.0, min_scale=1.0)
    period, factor, min_scale, good, scale, _ = rule_draw(seed, 1)
    check_transitions(worker, [True] * (2 * period - good + 2), scale, period, factor, min_scale, good)


@pytest.mark.points(1)
def test_scale_shrinks_and_counter_resets_on_overflow(worker, seed):
    """A non-finite step divides the scale by `factor` and sends the counter back to 0, whatever the counter was."""
    # Three good steps, an overflow, then three more must not grow the scale (period 4).
    flags = [True, True, True, False, True, True, True, True, False, False, True]
    check_transitions(worker, flags, 2.0 ** 12, period=4, factor=2.0, min_scale=1.0)
    check_transitions(worker, [False, True, False], 3.0 * 2 ** 10, period=6, factor=4.0, min_scale=1.0)
    # From a drawn non-zero counter, an overflow at every counter value (in a drawn order).
    period, factor, min_scale, good, scale, r = rule_draw(seed, 2)
    flags = overflow_at_every_count(period, good, r.permutation(period).tolist()) + [True] * period
    check_transitions(worker, flags, scale * factor ** period, period, factor, min_scale, good)


@pytest.mark.points(1)
def test_scale_never_goes_below_min_scale(worker, seed):
    """Repeated overflows stop at min_scale, also when min_scale is not a power of the factor."""
    check_transitions(worker, [False] * 4, 8.0, period=3, factor=2.0, min_scale=2.0)
    check_transitions(worker, [False] * 3, 10.0, period=3, factor=2.0, min_scale=3.0)
    period, factor, min_scale, good, scale, _ = rule_draw(seed, 3)
    check_transitions(worker, floor_flags(scale, good, period, factor, min_scale) + [True] * period,
                      scale, period, factor, min_scale, good)
    got, good, _, _ = scale_state(worker.dyn_scale_step(
        "dyn_scale_step(DynScale(1.5, 2), finite=False) with the default min_scale", 1.5, 2, False))
    if got != 1.0:
        fail(f"dyn_scale_step(DynScale(1.5, 2), finite=False) with the defaults returned scale {got:g}, expected 1 "
             "(the default min_scale is 1.0). "
             + ("That is shrinking below min_scale. " if got < 1.0 else "") + "Hint: max(scale / factor, min_scale).")


@pytest.mark.points(1)
def test_scale_is_held_in_float32(worker):
    """The scale stays float32 (2^16 and beyond are fine), the counter an integer."""
    for finite, scale, good in ((True, 2.0 ** 15, 2), (False, 2.0 ** 20, 1), (True, 2.0 ** 40, 0)):
        call = f"dyn_scale_step(DynScale(float32({scale:g}), int32({good})), finite={finite}, period=3)"
        got, got_good, s_dtype, g_dtype = scale_state(worker.dyn_scale_step(call, scale, good, finite, 3))
        expected = rule(scale, good, finite, 3, 2.0, 1.0)
        if s_dtype != jnp.float32 or not np.isfinite(got):
            fail(f"{call} returned a {s_dtype} scale {got:g}, expected float32 {expected[0]:g}. "
                 + ("That is holding the scale in fp16, where it overflows: fp16's largest number is 65504, "
                    "so 2^16 is already inf. " if s_dtype == jnp.float16 or not np.isfinite(got) else "")
                 + "Hint: keep the scale float32; only the model's compute is fp16.")
        if not jnp.issubdtype(g_dtype, jnp.integer):
            fail(f"{call} returned good_steps of dtype {g_dtype}, expected an integer (int32): it counts steps.")
        if not same_state((got, got_good), expected):
            fail(f"{call} returned ({got:g}, {got_good}), expected ({expected[0]:g}, {expected[1]}).")


@pytest.mark.points(2)
def test_scale_step_runs_under_jit_and_inside_scan(worker, seed):
    """The rule decides with data, not Python: it runs under jax.jit and as the body of lax.scan."""
    flags = [True, True, True, False, True, True, False, False, False, True, True, True, True]
    period, factor, min_scale, s0 = 3, 2.0, 4.0, 64.0
    got = scale_state(worker.dyn_scale_step_jit("jax.jit(dyn_scale_step)", 16.0, 2, True, period, factor,
                                                min_scale))[:2]
    if not same_state(got, rule(16.0, 2, True, period, factor, min_scale)):
        fail(f"under jax.jit, dyn_scale_step(DynScale(16, 2), finite=True, period=3) returned {got}, expected "
             f"{rule(16.0, 2, True, period, factor, min_scale)}.")
    drawn = rule_draw(seed, 4)
    for flags, (period, factor, min_scale, s0) in ((flags, (period, factor, min_scale, s0)),
                                                   (drawn[5].permutation(flags).tolist(), drawn[:3] + drawn[4:5])):
        expected, scale, good = [], s0, 0
        for f in flags:
            scale, good = rule(scale, good, f, period, factor, min_scale)
            expected.append((scale, good))
        scales, goods = worker.dyn_scale_step_scan(flags, s0, period, factor, min_scale)
        got = list(zip(np.asarray(scales, np.float64).tolist(), np.asarray(goods).tolist()))
        if len(got) != len(expected) or not all(map(same_state, got, expected)):
            k = next((i for i, (a, b) in enumerate(zip(got, expected)) if not same_state(a, b)), len(got))
            fail(f"inside lax.scan over finite flags {[int(f) for f in flags]} (period={period}, factor={factor}, "
                 f"min_scale={min_scale}, from scale {s0:g}), step {k} gave {got[k] if k < len(got) else 'nothing'}, "
                 f"expected {expected[k]}.")


# ---------------------------------------------------------------- all_finite

# Values near the top of each float type, one sign per leaf: every entry finite, but every square
# (a norm) and any sum of two overflow, in float16 (65504) and in float32 (3.4e38). Each dtype's
# largest finite value is among them (`abs(x) < finfo.max` calls it not finite), and 1e5, finite
# in float32 only (a cast to float16 makes it inf).
LARGE = {np.float16: (4e4, 65504.0), np.float32: (2e38, 3.4e38)}


def finite_tree_layout(seed: int):
    """[(path, dtype, shape)] of a drawn tree: nested dicts, a list and a tuple, float16 and
    float32 leaves (at least two of each), a scalar among them."""
    r = draw(seed, 5)
    paths = [("params", "dense", "kernel"), ("params", "dense", "bias"), ("moments", 0), ("moments", 1, 0),
             ("moments", 1, 1), ("scale",)]
    dtypes = [np.float16, np.float32] * 3
    r.shuffle(dtypes)
    shapes = [tuple(int(n) for n in r.integers(1, 6, size=int(r.integers(0, 3)))) for _ in paths]
    scalar = int(r.integers(len(paths)))
    shapes[scalar] = ()
    for dtype in (np.float16, np.float32):  # a leaf of each dtype with entries enough to add up
        if all(int(np.prod(s)) < 2 for s, d in zip(shapes, dtypes) if d == dtype):
            grow = next(i for i, d in enumerate(dtypes) if d == dtype and i != scalar)
            shapes[grow] = (2, int(r.integers(2, 5)))
    return [(path, dtype, shape) for path, dtype, shape in zip(paths, dtypes, shapes)]


def build_tree(leaves: dict):
    """The tree of finite_tree_layout's paths with these leaves."""
    get = lambda *path: leaves[path]
    return {"params": {"dense": {"kernel": get("params", "dense", "kernel"), "bias": get("params", "dense", "bias")}},
            "moments": [get("moments", 0), (get("moments", 1, 0), get("moments", 1, 1))],
            "scale": get("scale")}


def leaf_name(path) -> str:
    return "".join(f"[{p!r}]" for p in path)


def finite_cases(seed: int) -> list[tuple[str, object, bool, tuple]]:
    """(description, tree, expected, (leaf path, what was put in it)) for all_finite: finite trees
    of ordinary and of very large values, then an inf, a -inf and a NaN at a drawn entry of each
    leaf in turn (the other leaves very large on every other case)."""
    r = draw(seed, 6)
    layout = finite_tree_layout(seed)
    ordinary = {path: np.asarray(r.normal(size=shape), dtype) for path, dtype, shape in layout}

    def large(dtype, shape):
        low, high = LARGE[dtype]
        return np.asarray(r.uniform(low, high, size=shape) * r.choice((-1, 1)), dtype)

    def put(path, index, value):  # with the leaf's sign, so that its sum still overflows
        flat = big[path].reshape(-1).copy()
        flat[index] = np.copysign(value, flat[index])
        big[path] = flat.reshape(big[path].shape)

    big = {path: large(dtype, shape) for path, dtype, shape in layout}
    for dtype in (np.float16, np.float32):  # the largest finite value of each dtype
        put(next(path for path, d, _ in layout if d == dtype), -1, np.finfo(dtype).max)
    wide = [path for path, d, shape in layout if d == np.float32 and int(np.prod(shape)) > 1]
    if wide:  # a float32 value that float16 cannot hold
        put(wide[0], 0, 1e5)
    cases = [("every leaf finite", build_tree(ordinary), True, (None, None)),
             ("every leaf finite, with values near float16's and float32's largest (65504, 3.4e38: their squares "
              "and sums overflow)", build_tree(big), True, (None, None))]
    k = 0
    for path, dtype, shape in layout:
        for value in (np.inf, -np.inf, np.nan):
            leaves = dict(big if k % 2 else ordinary)
            leaf = leaves[path].copy()
            index = tuple(int(r.integers(n)) for n in shape)
            leaf[index] = value
            leaves[path] = leaf
            name = {np.inf: "an inf", -np.inf: "a -inf"}.get(value, "a NaN")
            where = f"{name} at {list(index)} of leaf {leaf_name(path)} ({np.dtype(dtype).name}, shape {shape})"
            cases.append((where, build_tree(leaves), False, (path, value)))
            k += 1
    return cases


def all_finite_mistake(wrong: list, cases) -> str:
    """What the cases all_finite got wrong have in common."""
    missed = [c for c in wrong if not c[2]]
    if any(c[2] for c in wrong):
        return ("It said False although every entry is finite: a sum or a norm of the values overflows (e.g. "
                "optax.global_norm squares 3.4e38), float32 values are cast to float16, or the largest finite "
                "value (65504, 3.4e38) is compared with `<`. Hint: test every entry, jnp.isfinite(leaf), and "
                "combine the booleans with jnp.all.")
    kinds = {str(c[3][1]) for c in missed}
    # the leaves none of whose non-finite entries was found, and the dtype of each leaf
    tried = {}
    for what, dtype, expected, (path, value) in missed:
        tried.setdefault(path, set()).add(str(value))
    blind = {path for path, values in tried.items() if len(values) == 3}
    dtypes = {c[3][0]: dtype_of(c[1], c[3][0]) for c in cases if c[3][0] is not None}
    for dtype in ("float16", "float32"):
        if blind and blind == {p for p, d in dtypes.items() if d == dtype}:
            return (f"No leaf of dtype {dtype} is looked at: the gradients here are float32, but a tree may hold "
                    "any float dtype. Hint: jnp.isfinite works on every float dtype; look at every leaf.")
    if blind:
        return (f"The leaves {', '.join(sorted(map(leaf_name, blind)))} are not looked at. Hint: look at every "
                "leaf (jax.tree.leaves) and every entry.")
    if kinds == {"nan"}:
        return "NaN is missed (NaN is not greater or smaller than anything). Hint: jnp.isfinite is False for NaN too."
    if "nan" not in kinds:
        return "inf is missed. Hint: jnp.isfinite is False for inf and -inf too."
    return "Hint: look at every leaf (jax.tree.leaves) and every entry (jnp.isfinite)."


@pytest.mark.points(1)
def test_all_finite_checks_every_leaf(worker, seed):
    """True only when every entry of every leaf is finite, whatever its dtype; inf, -inf or NaN anywhere is found."""
    every = finite_cases(seed)
    # Under jit (one compile) every tree, first, so that a mistake is told from all of them; called
    # directly, where each case costs a dispatch per operation, the finite trees and the first tree
    # of each non-finite kind.
    eager = every[:2] + [next(c for c in every if str(c[3][1]) == kind) for kind in ("inf", "-inf", "nan")]
    for how, jit, cases in (("jax.jit(all_finite)", True, every), ("all_finite", False, eager)):
        trees, whats = [c[1] for c in cases], [c[0] for c in cases]
        got = [read_value(v, how) for v in worker.all_finite(trees, jit, [f"{how} with {w}" for w in whats])]
        wrong = [(what, dtype_of(tree, info[0]), expected, info)
                 for (what, tree, expected, info), flag in zip(cases, got) if flag != expected]
        if wrong:
            what, _, expected, _ = wrong[0]
            fail(f"{how} returned {not expected} with {what}, expected {expected}"
                 + (f" (and {len(wrong) - 1} more of the {len(cases)} trees tried)" if len(wrong) > 1 else "")
                 + ". " + all_finite_mistake(wrong, cases))


def dtype_of(tree, path):
    if path is None:
        return None
    leaf = tree
    for p in path:
        leaf = leaf[p]
    return np.asarray(leaf).dtype.name


# ---------------------------------------------------------------- scaled_grads

def learner_grads(worker, seed: int, scale: float):
    """(the gradients flattened, float64's, readings of their dtypes and of the finite flag, the
    call): scaled_grads is compiled once, under jit, for every scale and data set."""
    p, x, y = problem(seed)
    call = f"scaled_grads(params, x, y, scale={scale:g})"
    got = worker.scaled_grads(f32(p), *f32((x, y)), scale, call)
    true = grads_np(p, x, y)
    # the probe checked each gradient's shape; the judge does too (a forged reply of other shapes
    # would be flattened and broadcast against the float64 gradient)
    grads = {k: as_array(got["grads"][k], f"{call}: grads['{k}']", np.shape(true[k])) for k in KEYS}
    return flat(grads), flat(true), got["dtypes"], got["finite"], call


@expected
def own_fp16_grads(seed: int, scale: float) -> np.ndarray:
    p, x, y = problem(seed)
    return flat(own_step(f32(p), *f32((x, y)), jnp.float32(scale))[0])


@expected
def own_bf16_unscaled_grads(seed: int, scale: float) -> np.ndarray:
    """The right scaled gradients, unscaled in bfloat16: a known mistake's numbers."""
    bf16 = jnp.bfloat16  # ml_dtypes' type, which NumPy computes with
    scaled = own_fp16_grads(seed, scale).astype(np.float32) * np.float32(scale)  # exact: a power of two
    return (scaled.astype(bf16) / np.asarray(scale, bf16)).astype(np.float64)


@pytest.fixture(scope="module")
def grads_program(worker):
    """What the grader read of the live scaled_grads (its program sent by the worker, rebuilt and
    run here): the operand dtypes of each dot_general (a decoy that is computed and discarded is
    not in it) and its gradients on the underflow data set at scales 1 and 2^15; or the message
    saying why it cannot be traced or read."""
    p, x, y = problem(TRACE_SEED)
    sent = worker.scaled_grads_program(f32(p), *f32((x, y)), 2.0 ** 15)
    if part(sent, "error") is not None:
        return str(sent["error"])
    try:
        closed = program_data.decode(sent).closed
    except program_data.ProgramError as exc:
        return f"the program of scaled_grads could not be read: {exc}"
    reading = grads_reading(closed, f32(p), [f32(problem(grad_seeds()[0]))], (1.0, 2.0 ** 15),
                            IN_PROCESS.pop((IN_PROCESS["judge"], "scaled_grads"), None))
    if "error" in reading:
        return reading["error"]
    return {"dots": [tuple(d) for d in reading["dots"]], "at": dict(zip((1.0, 2.0 ** 15), reading["grads"][0]))}


def fp16_verdict(program) -> str | None:
    """Why the program is not an fp16 computation of the gradients, or None when it is."""
    if isinstance(program, str):
        return program
    dots = program["dots"]
    not_f16 = sorted(set(dots) - {("float16", "float16")})
    if not_f16:
        return (f"{sum(1 for d in dots if d != ('float16', 'float16'))} "
                f"matrix product(s) (@, jnp.dot) of the traced scaled_grads have {not_f16} operands: the compute must be fp16 "
                "(the parameters are cast to float16 inside fp16_loss). Hint: differentiate the given fp16_loss; "
                "do not write an fp32 copy of the model.")
    if len(dots) < 3:
        return (f"the traced scaled_grads has {len(dots)} float16 matrix product(s) (@, jnp.dot) that reach its result; the forward "
                "and backward passes of the model need at least 3. Hint: return jax.grad of the fp16 loss.")
    return None


# How close the gradients of the program read must be to the grader's own fp16 gradients at scale 1
# (relative, in norm) for its dots to count: a right program is fp16's rounding away (~4e-4), and
# the known mistakes of scaling and unscaling are at most bfloat16's rounding away (~2e-3) at scale 1.
HELD_RTOL = 1e-2
# The program read and the learner's scaled_grads are one program: compiled twice, their gradients
# differ at most by XLA's choices of fusion.
SAME_RTOL = 1e-3


def same_gradients(a, b) -> bool:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape or not np.array_equal(np.isfinite(a), np.isfinite(b)):
        return False
    finite = np.isfinite(a)
    return bool(np.linalg.norm(a[finite] - b[finite]) <= SAME_RTOL * np.linalg.norm(b[finite]) + 1e-30)


def fp16_failure(worker, grads_program) -> str | None:
    """Why scaled_grads is not an fp16 computation doing the work, or None when it is."""
    verdict = fp16_verdict(grads_program)
    if verdict:
        return verdict
    # The dots must also do the work: an fp32 model written without dot_general, plus the fp16
    # gradients times zero, has only float16 dots but none of fp16's underflow. The gradients
    # read here are the program's, run by the grader.
    got, true, _, _, call = learner_grads(worker, grad_seeds()[0], 1.0)
    ran = grads_program["at"][1.0]
    own = zero_share(own_fp16_grads(grad_seeds()[0], 1.0), true)
    if zero_share(ran, true) < own / 2:
        return (f"the float16 matrix products are there, but the gradients do not show fp16's underflow: {call} has "
                f"{zero_share(ran, true):.1%} zeros where fp16 gives {own:.1%}, so the gradients come from another "
                "computation. Hint: return the gradients of the given fp16_loss, nothing else.")
    return held_to_the_gradients(worker, grads_program, got, call)


def held_to_the_gradients(worker, grads_program, got, call) -> str | None:
    """The program read computes fp16's gradients and is the one that computes the learner's: run
    by the grader at scale 1, it gives the grader's own fp16 gradients, and at scales 1 and 2^15
    what scaled_grads returned. A program with fp16's marks that computes something else earns
    nothing."""
    seed = grad_seeds()[0]
    ran, own = grads_program["at"][1.0], own_fp16_grads(seed, 1.0)
    if not rel_err(ran, own) <= HELD_RTOL:
        return (f"run by the grader on its own inputs at scale 1, the program of scaled_grads returns gradients "
                f"{rel_err(ran, own):.2e} away from fp16's (relative error; {fmt(ran)} vs {fmt(own)}): the technique "
                "is judged on the program that computes your gradients. Hint: return the gradients of the given "
                "fp16_loss, nothing else.")
    for scale, yours in ((1.0, got), (2.0 ** 15, learner_grads(worker, seed, 2.0 ** 15)[0])):
        if not same_gradients(grads_program["at"][scale], yours):
            return (f"the program of scaled_grads, run by the grader at scale {scale:g}, returns other gradients "
                    f"({fmt(grads_program['at'][scale])}) than {call.replace('scale=1', f'scale={scale:g}')} did "
                    f"({fmt(yours)}): the technique is judged on the program that computes your gradients. Hint: "
                    "scaled_grads should be one function of its inputs, the same traced or called.")
    return None


def require_fp16(worker, grads_program):
    """Gradients count only when computed in fp16, where loss scaling matters."""
    failure = fp16_failure(worker, grads_program)
    if failure:
        fail("these gradients are not computed in fp16, where loss scaling matters, so they do not show the "
             f"technique (see scaled_grads_compute_in_fp16): {failure}")


@pytest.mark.points(1)
def test_grads_at_scale_1_underflow_as_fp16_does(worker, note):
    """With scale 1, about as many entries underflow to 0 as in the grader's own fp16 gradient."""
    got, true, _, _, call = learner_grads(worker, grad_seeds()[0], 1.0)
    own = zero_share(own_fp16_grads(grad_seeds()[0], 1.0), true)
    assert own > 0.05, f"grader: the model should underflow in fp16 at scale 1 (measured {own:.1%})"
    share = zero_share(got, true)
    note(f"scale 1: {share:.1%} of the gradient entries underflowed to 0 (relative error {rel_err(got, true):.2e}); "
         f"the true gradients are at most {np.abs(true).max():.1e}, fp16's smallest normal number is {F16_TINY:.1e}.")
    if share < own / 2:
        fail(f"{call}: {share:.1%} of the gradient entries are 0 where the float64 gradient is not; fp16 "
             f"loses {own:.1%} of them to underflow here. Your gradients are not computed in fp16. "
             "Hint: differentiate the given fp16_loss (it casts to float16) and keep the model as given.")
    # The entries that did not underflow must be fp16's too: zeros (or any numbers) at ~the right
    # share are no fp16 gradient. `not <=`, so that a NaN is wrong too.
    own_err, err = rel_err(own_fp16_grads(grad_seeds()[0], 1.0), true), rel_err(got, true)
    if not err <= ERR_SLACK * own_err:
        fail(f"{call}: {share:.1%} of the gradient entries are 0 where the float64 gradient is not, but the "
             f"gradients are {err:.2e} away from it (relative error), where fp16 with its underflow is {own_err:.2e} "
             "away. Your gradients are not computed in fp16. Hint: differentiate the given fp16_loss (it casts "
             "to float16) and keep the model as given.")


@pytest.mark.points(2)
def test_grads_at_scale_2_15_keep_fp16s_precision(worker, grads_program, note):
    """With scale 2^15 no entry underflows, and the unscaled gradients are as close to float64 as fp16 allows."""
    scale = 2.0 ** 15
    for seed in grad_seeds():
        got, true, dtypes, _, call = learner_grads(worker, seed, scale)
        share, err = zero_share(got, true), rel_err(got, true)
        own = rel_err(own_fp16_grads(seed, scale), true)
        bound = ERR_SLACK * own
        if seed == grad_seeds()[0]:
            note(f"scale 2^15: {share:.1%} underflowed, relative error {err:.2e} (fp16's own: {own:.2e}; the "
                 "chapter's bound: 1%).")
        if share == 0 and err <= bound:
            continue
        if rel_err(got / scale, true) < ERR_SLACK * own:
            fail(f"{call}: the gradients are {scale:g} times too big ({fmt(got)} vs {fmt(true)}). That is "
                 "forgetting to unscale: divide each gradient by the scale (in fp32) after differentiating.")
        if share > 0 and "float16" in read_value(dtypes).values():
            fail(f"{call}: {share:.1%} of the gradient entries are 0 (relative error {err:.2e}): the gradients come "
                 "back float16, where dividing by the scale underflows again (see grads_come_back_in_float32). "
                 "Hint: unscale in float32, the parameters' dtype.")
        if share > 0:
            fail(f"{call}: {share:.1%} of the gradient entries are still 0 (relative error {err:.2e}), as without "
                 "scaling: the fp16 backward pass never saw the scale. That is scaling after differentiating "
                 "(or multiplying the scale in and dividing it out before fp16 sees it). Hint: differentiate "
                 "lambda p: fp16_loss(p, x, y) * scale, then divide the gradients by scale.")
        low = ""
        if rel_err(got, own_bf16_unscaled_grads(seed, scale)) < own / 10:
            low = "That is unscaling in bfloat16, whose 8 bits of mantissa round off more than fp16 did. "
        fail(f"{call}: relative error {err:.2e} against the float64 gradient, where fp16 with the same scale is "
             f"{own:.2e} away (allowed: {ERR_SLACK:g}x that). "
             f"{low or 'The gradients lose precision after the backward pass. '}"
             "Hint: divide the float32 gradients by the float32 scale, and keep them float32.")
    require_fp16(worker, grads_program)


@pytest.mark.points(1)
def test_grads_at_scale_2_32_report_not_finite(worker, grads_program):
    """With scale 2^32 the fp16 backward overflows and finite is False; at 2^15 it is True."""
    assert not np.all(np.isfinite(own_fp16_grads(grad_seeds()[0], 2.0 ** 32))), "grader: fp16 should overflow at 2^32 here"
    for scale, expected in ((2.0 ** 32, False), (2.0 ** 15, True)):
        got, _, _, finite, call = learner_grads(worker, grad_seeds()[0], scale)
        flag = read_value(finite)
        if flag != expected:
            overflowed = not np.all(np.isfinite(got))
            why = "Hint: finite = all_finite(grads)."
            if not overflowed and scale > 2 ** 16:
                # Only a program that computes in fp16 can overflow here: blame the order of the
                # scaling only when it does.
                failure = fp16_failure(worker, grads_program)
                why = (f"Your gradients are not computed in fp16, so nothing overflows at 2^32 (see "
                       f"scaled_grads_compute_in_fp16). Hint: differentiate the given fp16_loss." if failure else
                       "At 2^32 the scaled cotangents exceed fp16's 65504 and become inf, so the scale must be "
                       "applied before differentiating; hint: finite = all_finite(grads) of those gradients.")
            fail(f"{call} reported finite={flag}, expected {expected}"
                 + (f": {int(np.sum(~np.isfinite(got)))} gradient entries are inf or NaN. "
                    if overflowed and flag else ". ")
                 + why)


@pytest.mark.points(1)
def test_grads_come_back_in_float32(worker, grads_program):
    """The gradients have the parameters' dtype, float32, whatever the compute dtype."""
    _, _, dtypes, _, call = learner_grads(worker, grad_seeds()[0], 2.0 ** 15)
    dtypes = read_value(dtypes)
    if set(dtypes.values()) != {"float32"}:
        fail(f"{call} returned gradients of dtypes {dtypes}, expected float32 for every leaf: the gradient of an "
             "fp32 parameter is fp32 (the transpose of the cast), and unscaling must happen in fp32, where "
             "g / scale cannot underflow. Hint: do not cast the gradients.")
    require_fp16(worker, grads_program)


@pytest.mark.points(2)
def test_scaled_grads_compute_in_fp16(worker, grads_program):
    """Every dot_general that reaches the result is float16, and the result shows fp16's underflow."""
    failure = fp16_failure(worker, grads_program)
    if failure:
        fail(failure)


# ---------------------------------------------------------------- train_fp16_dynamic

@partial(jax.jit, static_argnums=0)
def adam_step(tx, g, opt, p):
    updates, opt = tx.update(g, opt, p)
    return optax.apply_updates(p, updates), opt


def learning_rate(seed: int) -> float:
    """Adam's learning rate for the training checks, drawn log-uniformly, two significant digits."""
    low, high = np.log(LR_RANGE[0]), np.log(LR_RANGE[1])
    return float(f"{np.exp(draw(seed, 9).uniform(low, high)):.2g}")


@expected
def simulate_training(data_seed, lr, scale, good, steps, mistake=None) -> dict:
    """The grader's loop: Python `if` for the skip, the rule in Python, from DynScale(scale, good)
    on problem(data_seed) with optax.adam(lr). `mistake` simulates a named wrong idea so that its
    message can be recognised. Kept between runs (it depends on nothing the learner writes)."""
    def compute():
        p, x, y = problem(data_seed)
        p, x, y = f32(p), *f32((x, y))
        tx = optax.adam(lr)
        opt, s, g, out = tx.init(p), scale, good, {"scales": [], "finites": [], "losses": []}
        for _ in range(steps):
            grads, finite, loss = own_step(p, x, y, jnp.float32(s))
            finite = bool(finite)
            out["scales"].append(s), out["finites"].append(finite), out["losses"].append(float(loss))
            if mistake == "update_not_unscaled":
                grads = jax.tree.map(lambda t: t * jnp.float32(s), grads)
            if finite or mistake == "update_on_overflow":
                p, opt = adam_step(tx, grads, opt, p)
            elif mistake == "state_changes_on_skip":
                _, opt = adam_step(tx, jax.tree.map(jnp.zeros_like, grads), opt, p)
            s, g = rule(s, g, finite, PERIOD, 2.0, 1.0)
        out["flat"], out["scale"], out["good"] = flat(p).tolist(), s, g
        return out

    return figure_store.stored("ex8 own training", (data_seed, lr, scale, good, steps, mistake), compute)


@expected
def own_first_step_unmoved(data_seed: int, lr: float, scale: float) -> float:
    """Share of the parameter entries that one Adam step from a fresh state leaves where they were,
    with the grader's own scaled fp16 gradients on problem(data_seed): the entries whose gradient
    underflowed to 0."""
    def compute():
        p, x, y = problem(data_seed)
        tx = optax.adam(lr)
        g, _, _ = own_step(f32(p), *f32((x, y)), jnp.float32(scale))
        return float(np.mean(flat(adam_step(tx, g, tx.init(f32(p)), f32(p))[0]) == flat(f32(p))))

    return figure_store.stored("ex8 own first step", (data_seed, lr, scale), compute)


def counter_start(seed: int) -> tuple[float, int]:
    """A finite starting scale with a drawn non-zero counter (1 to PERIOD - 3), so that the first
    growth comes at a step that depends on ls0.good_steps."""
    return 2.0 ** 31, int(draw(seed, 7).integers(1, PERIOD - 2))


def bad_x(seed: int, x):
    """x with an inf or -inf at a drawn entry: tanh saturates, so the forward pass and every
    gradient stay finite but w1's, where the inf meets the zero derivative of tanh (inf * 0)."""
    r = draw(seed, 8)
    x = np.array(x, np.float32)
    x[int(r.integers(N)), int(r.integers(D))] = r.choice((np.inf, -np.inf))
    return x


# The runs of the learner's loop (name, data set, scale, good), all of one compile.
def training_runs(seed: int):
    return [("recover", "train", TOO_LARGE, 0), ("hopeless", "train", HOPELESS, 0),
            ("after_growth", "train", *AFTER_GROWTH), ("counter", "train", *counter_start(seed))]


# The first step of the loop run on its own (name, data set, scale, good).
FIRST_STEPS = [("scale 1", "grads", 1.0, 0), ("scale 2^15", "grads", 2.0 ** 15, 0),
               ("one inf in x", "grads with one inf in x", 2.0 ** 15, 0), ("scale 2^100", "grads", HOPELESS, 0)]
FIRST_STEP_START = {name: f"ls0=DynScale({pow2(scale)}, {good})" for name, _, scale, good in FIRST_STEPS}


@pytest.fixture(scope="module")
def training(worker, seed):
    """Whether the loop is one loop, the learner's runs of it, summaries of its traced program,
    and what its first step does on its own; or, when the loop is unrolled or cannot be traced,
    the message saying so (then nothing is run: an unrolled loop takes minutes to compile)."""
    p, x, y = problem(TRAIN_SEED)
    p, x, y = f32(p), *f32((x, y))
    lr = learning_rate(seed)
    what = {"loop": None, "runs": None, "program": None, "first_steps": None, "seed": seed, "p": p, "lr": lr}
    loop = worker.loop_sizes(p, x, y, TOO_LARGE, lr, list(SMALL_STEPS))
    if part(loop, "error") is not None:
        what["loop"] = str(loop["error"])
        return what
    try:  # the sizes are counted here, on the programs the worker sent
        traced_at = {n: unread(part(part(loop, "programs"), n)) for n in SMALL_STEPS}
        a, b = (equations(traced_at[n]) for n in SMALL_STEPS)
    except program_data.ProgramError as exc:
        what["loop"] = f"the program of train_fp16_dynamic could not be read: {exc}."
        return what
    if a != b:
        what["loop"] = (f"the traced train_fp16_dynamic has {a} equations for steps={SMALL_STEPS[0]} and {b} for "
                        f"steps={SMALL_STEPS[1]}: the loop is unrolled in Python, one copy of the step per step, so "
                        f"at steps={STEPS} it is {STEPS} steps in a row rather than one compiled loop (under jax.jit "
                        "they compile as one program, which takes minutes; the loop was not run). Hint: write one "
                        "step as a function of the carry (params, optimizer state, DynScale) and run it with "
                        "lax.scan(step, carry, None, length=steps) inside one jax.jit.")
        return what
    sent = worker.lowered_sizes(p, x, y, TOO_LARGE, lr, list(LOWERED_STEPS))
    try:  # lowered here (not compiled), from the programs the worker sent
        traced_at.update({n: unread(part(sent, n)) for n in LOWERED_STEPS})
        lowered = {n: lowered_size(traced_at[n]) for n in LOWERED_STEPS}
    except program_data.ProgramError as exc:
        what["loop"] = f"the program of train_fp16_dynamic could not be read: {exc}."
        return what
    a, b = (lowered[n]["lines"] for n in LOWERED_STEPS)
    if b >= UNROLL_GROWTH * a:
        unroll = lowered[LOWERED_STEPS[1]]["unroll"]
        what["loop"] = (f"the program handed to XLA has {a} lines for steps={LOWERED_STEPS[0]} and {b} for "
                        f"steps={LOWERED_STEPS[1]}: the loop is unrolled"
                        + ((" (its lax.scan unrolls every step: unroll=True or unroll=steps)"
                             if unroll >= LOWERED_STEPS[1] else f" (its lax.scan has unroll={unroll})")
                           if unroll > 1 else "")
                        + f", so at steps={STEPS} XLA compiles {STEPS} copies of the step, which takes minutes (it "
                        "was not run). Hint: leave lax.scan's unroll at its default, 1.")
        return what
    reply = worker.train(p, x, y, TOO_LARGE, lr, STEPS)
    if part(reply, "error") is not None:  # runs on concrete values, but cannot be traced: not one jitted loop
        what["program"] = str(reply["error"])
        return what
    try:
        closed = unread(part(reply, "program"))
    except program_data.ProgramError as exc:
        what["program"] = f"the program of train_fp16_dynamic could not be read: {exc}."
        return what
    other = next((n for n, c in traced_at.items() if signature(c) != signature(closed)), None)
    if other is not None:  # the sizes read are those of the program run
        what["loop"] = (f"the programs sent for train_fp16_dynamic at steps={other} and steps={STEPS} are not the same "
                        "program at two lengths (the loop was not run). Hint: train_fp16_dynamic should do the same "
                        "operations whatever the number of steps, in one lax.scan of length steps.")
        return what
    want = [(tuple(np.shape(a)), np.asarray(a).dtype.name) for a in jax.tree.leaves(
        (p, (np.float32(1), np.int32(0)), x, y))]
    got = [(tuple(v.aval.shape), v.aval.dtype.name) for v in closed.invars]
    if got != want:
        what["program"] = (f"the program sent for train_fp16_dynamic takes inputs {got}, not the grader's (params, "
                           f"ls0, x, y) {want}.")
        return what
    g, gx, gy = problem(grad_seeds()[0])
    data = {"train": (p, x, y), "grads": f32((g, gx, gy)), "grads with one inf in x": f32((g, bad_x(seed, gx), gy))}
    # The grader runs the program itself: every run the training checks read, from each start.
    try:
        what["runs"] = runs(closed, part(reply, "layout"), [(name, scale, good) for name, _, scale, good
                                                          in training_runs(seed)], data["train"], STEPS)
    except Exception as exc:  # e.g. a layout that is no layout of the program's results
        what["program"] = f"the program sent for train_fp16_dynamic could not be run: {type(exc).__name__}: {exc}."
        return what
    live = live_program(closed)
    cases = [(name, data[which][0], (np.float32(scale), np.int32(good)), *data[which][1:])
             for name, which, scale, good in FIRST_STEPS]
    try:
        steps_alone = first_steps(closed, live, STEPS, cases)
    except Exception as exc:  # a program the grader cannot take apart: say so, not a traceback
        steps_alone = {"error": f"the grader could not take the traced loop apart ({type(exc).__name__})"}
    what.update(program=program_summary(live, STEPS), first_steps=steps_alone)
    return what


def unread(sent):
    """A program the worker sent, rebuilt (a ProgramError when it is none)."""
    return program_data.decode(sent).closed


def signature(closed) -> tuple:
    """What two traces of one loop at different lengths share: every primitive, in order, and the
    unroll of every scan."""
    return (tuple(program_data.primitive_sequence(closed)),
            tuple(str(e.params.get("unroll")) for e in jaxpr.find(closed, "scan")))


def part(reply, key):
    """reply[key] of a worker's reply, None when the reply has no such part."""
    return reply.get(key) if isinstance(reply, dict) else None


def loop_failure(training) -> str | None:
    """Why the loop is not one loop of the steps inside one program, or None."""
    if training["loop"]:
        return training["loop"]
    program = training["program"]
    if isinstance(program, str):
        return program
    if program["loops"] != 1:
        lengths = program["scan_lengths"]
        return (f"expected one lax.scan of length steps={STEPS} holding the model in the traced train_fp16_dynamic, "
                f"found {program['loops']} ({'scans of lengths ' + str(lengths) if lengths else 'no scan'}). Hint: "
                "lax.scan(step, (params, tx.init(params), ls0), None, length=steps); a Python loop unrolls every "
                "step into the program.")
    return None


def require_one_loop(training):
    """A loop's numbers count only when they come from the loop the exercise asks for."""
    if loop_failure(training):
        fail(f"the numbers of this loop are not produced by one lax.scan of length steps={STEPS}, so they do not "
             "show the technique" + ("; the loop was not run" if training["runs"] is None else "")
             + " (see train_is_one_scan_in_one_jit). Hint: write the step as a scan body carrying (params, "
             "optimizer state, DynScale).")


def run_of(training, name):
    if training["runs"] is None:
        require_one_loop(training)
    return training["runs"][name]


def per_step(run, what):
    """(scales, finites, losses) of a run, float64, bool and float64 arrays of shape (STEPS,)."""
    return read_value(run["per_step"], what)


def params_of(run, what, part="params_f64"):
    """The returned params, checked to be a dict with the keys of params: as float64 arrays, or
    (part="params_dtypes") the names of their dtypes."""
    read_value(run["params"], what)
    return read_value(run[part])


def scale_dtype_problem(run) -> str | None:
    """The message when a run's scale is held in float16 (it overflows from 2^16 on), else None."""
    scales_dtype, ls_dtype = read_value(run["scales_dtype"]), read_value(run["ls_scale_dtype"])
    if "float16" in (scales_dtype, ls_dtype):
        return (f"The scales come back {scales_dtype} and the final DynScale's scale {ls_dtype}: that is holding the "
                "scale in fp16, where 2^16 and above are inf, so no step can be finite. Hint: keep DynScale.scale "
                "float32 through the loop; only the model computes in fp16.")
    return None


def blown_up(run) -> str | None:
    """The message when a run's final parameters are inf or NaN: an overflow reached them."""
    try:
        params = read_value(run["params_f64"])
    except Exception:  # the parameters' own check says what is wrong with them
        return None
    if all(np.all(np.isfinite(np.asarray(v, np.float64))) for v in params.values()):
        return None
    return ("The parameters end inf/NaN: an overflow's gradients reached them (updating on an overflow), and no "
            "step after that can be finite. Hint: when finite is False keep the parameters and the optimizer "
            "state exactly as they were.")


def describe(start) -> str:
    scale, good = start
    return f"ls0=DynScale({pow2(scale)}, {good})"


def compare_run(training, name, start, check_losses=True):
    """The run's scales, finite flags, losses, final parameters and DynScale against the
    grader's simulation from the same start."""
    run = run_of(training, name)
    lr = training["lr"]
    exp = simulate_training(TRAIN_SEED, lr, *start, STEPS)
    recorded_ahead(lambda: start[1] and simulate_training(TRAIN_SEED, lr, start[0], 0, STEPS))
    what = f"train_fp16_dynamic(..., {describe(start)}, steps={STEPS}, tx=optax.adam({lr}))"
    scales, finites, losses = per_step(run, what)
    dtype_hint = scale_dtype_problem(run)
    if finites.shape != (STEPS,) or list(finites) != exp["finites"]:
        k = next((i for i, (a, b) in enumerate(zip(finites, exp["finites"])) if a != b), min(len(finites), STEPS))
        fail(f"{what}: finite flags per step {finites.astype(int).tolist()[:k + 3]}..., expected "
             f"{np.array(exp['finites']).astype(int).tolist()[:k + 3]}... (first difference at step {k}). "
             + (dtype_hint or blown_up(run)
                or "Hint: finite is all_finite of the unscaled gradients at the step's scale."))
    if not all(map(same_scale, scales.tolist(), exp["scales"])):
        k = next(i for i, (a, b) in enumerate(zip(scales, exp["scales"])) if not same_scale(a, b))
        ignored = or_else(lambda: simulate_training(TRAIN_SEED, lr, start[0], 0, STEPS)["scales"], None) if start[1] else None
        counter = (" That is ignoring ls0's counter: the scales are those of a start from "
                   f"DynScale({pow2(start[0])}, 0). "
                   f"Hint: start the loop from ls0 as given; its good_steps={start[1]} already count toward the period."
                   if ignored and all(map(same_scale, scales.tolist(), ignored)) else "")
        first = max(0, k - 3)
        fail(f"{what}: the scale used at step {k} is {pow2(scales[k])}, expected {pow2(exp['scales'][k])} (steps "
             f"{first} to {k + 1} should use {', '.join(map(pow2, exp['scales'][first:k + 2]))}; yours used "
             f"{', '.join(map(pow2, scales[first:k + 2]))})."
             + (counter or " " + (dtype_hint or "Hint: record ls.scale before the step and apply "
                                  "dyn_scale_step(ls, finite) with its defaults after it.")))
    compare_with_simulation(training, start, flat(params_of(run, what)), "flat", f"{what}: final parameters",
                            PARAM_RTOL, dtype_hint or "Hint: update with the tx you are given, and skip exactly the "
                            "steps whose gradients are not finite.")
    if check_losses:
        compare_with_simulation(training, start, losses, "losses", f"{what}: losses", LOSS_RTOL,
                                "Hint: record fp16_loss (unscaled) at the parameters the step starts from.")
    got_scale, got_good, _, _ = scale_state(read_value(run["ls"], what))
    if not same_state((got_scale, got_good), (exp["scale"], exp["good"])):
        fail(f"{what}: final DynScale ({got_scale:g}, {got_good}), expected ({exp['scale']:g}, {exp['good']}).")


@pytest.mark.points(2)
def test_training_matches_step_by_step_simulation(worker, training):
    """Scales, finite flags, losses, final parameters and DynScale equal the grader's simulation, from any ls0."""
    compare_run(training, "recover", (TOO_LARGE, 0))
    compare_run(training, "counter", counter_start(training["seed"]), check_losses=False)
    require_one_loop(training)


TRAINING_MISTAKES = (
    ("state_changes_on_skip", "That is changing the optimizer state on a skipped step (e.g. Adam's count and "
                              "moments advanced by an update with zeroed gradients). Hint: select the old "
                              "optimizer state as well as the old parameters when the step is not finite."),
    ("update_on_overflow", "That is updating on an overflow: the inf/NaN gradients reach the parameters. "
                           "Hint: when finite is False keep the parameters and the optimizer state as they were."),
    ("update_not_unscaled", "That is updating with the gradients of the scaled loss, not divided by the scale: Adam "
                            "forgives most of it, but not where a gradient is as small as its eps. Hint: update with "
                            "the gradients scaled_grads returns (divided by the scale, in float32)."),
)


def compare_with_simulation(training, start, got, key, what, rtol, hint=""):
    """assert_close against the simulation; the named mistakes are simulated only when it fails.
    No absolute floor: the losses are ~1e-5 (the loss weight), below numeric.ATOL."""
    expected = simulate_training(TRAIN_SEED, training["lr"], *start, STEPS)[key]
    recorded_ahead(lambda: [simulate_training(TRAIN_SEED, training["lr"], *start, STEPS, mistake)
                            for mistake, _ in TRAINING_MISTAKES])
    if is_close(got, expected, rtol, atol=0.0):
        return
    mistakes = [(or_else(lambda m=mistake: simulate_training(TRAIN_SEED, training["lr"], *start, STEPS, m)[key], None),
                 message) for mistake, message in TRAINING_MISTAKES]
    mistakes = [(value, message) for value, message in mistakes if value is not None]  # the students' copy: those recorded
    assert_close(got, expected, what, hint, rtol=rtol, atol=0.0, mistakes=mistakes)


@pytest.mark.points(2)
def test_skipped_steps_leave_params_and_adam_state_unchanged(worker, training):
    """Every step skipped: parameters bit for bit unchanged; a skip after updates: Adam's state as it was."""
    what = f"train_fp16_dynamic from ls0=DynScale({pow2(HOPELESS)}, 0) (every one of the {STEPS} steps overflows)"
    run = run_of(training, "hopeless")
    _, finites, _ = per_step(run, what)
    params = params_of(run, what)
    changed = [k for k in KEYS if not np.array_equal(params[k], np.asarray(training["p"][k]))]
    if finites.any() or changed:
        nan = any(not np.all(np.isfinite(params[k])) for k in changed)
        steps = np.flatnonzero(finites).tolist()
        fail(f"{what}: " + (f"finite was True at {len(steps)} steps ({steps[:5]}{'...' if len(steps) > 5 else ''}); "
                            if finites.any() else "")
             + (f"parameters {changed} changed although no step was finite. " if changed else "")
             + ("They are inf/NaN: that is updating on an overflow. " if nan else "")
             + (scale_dtype_problem(run) or "Hint: a skipped step keeps the old parameters and optimizer state "
                "exactly (jnp.where(finite, new, old))."))
    hint = "Hint: on a skipped step keep params and optimizer state; on a finite one apply tx.update."
    for name, start, when in (("recover", (TOO_LARGE, 0), "the first steps overflow"),
                              ("after_growth", AFTER_GROWTH, "step 0 is finite, then the scale grows and step 1 "
                                                             "overflows")):
        run = run_of(training, name)
        what = f"train_fp16_dynamic from {describe(start)} ({when})"
        if name == "after_growth" and list(per_step(run, what)[1]) != simulate_training(
                TRAIN_SEED, training["lr"], *start, STEPS)["finites"]:
            continue  # its skips are not where the rule puts them: training_matches_step_by_step_simulation says so
        compare_with_simulation(training, start, flat(params_of(run, what)), "flat", f"{what}: final parameters",
                                PARAM_RTOL, scale_dtype_problem(run) or hint)
    require_one_loop(training)


@pytest.mark.points(1)
def test_training_recovers_from_a_too_large_scale(worker, training, note):
    """From a scale far too large, the scale halves until the gradients are finite, then the loss falls."""
    what = f"train_fp16_dynamic from ls0=DynScale({pow2(TOO_LARGE)}, 0)"
    exp = simulate_training(TRAIN_SEED, training["lr"], TOO_LARGE, 0, STEPS)
    first = int(np.argmax(exp["finites"]))
    assert 0 < first and exp["losses"][-1] < 0.5 * exp["losses"][first], "grader: the simulated run should recover"
    note(f"the grader's own run from scale {pow2(TOO_LARGE)} with optax.adam({training['lr']}): {first} steps "
         f"skipped, first finite at "
         f"{pow2(exp['scales'][first])}, loss {exp['losses'][first]:.3g} -> {exp['losses'][-1]:.3g} in {STEPS} steps.")
    run = run_of(training, "recover")
    scales, finites, losses = per_step(run, what)
    if not finites.any():
        fail(f"{what}: no step was finite in {STEPS} steps (scales {fmt(scales)}). "
             + (scale_dtype_problem(run) or blown_up(run) or (
                 ("The scale is inf: that is holding the scale in fp16, where it overflows. "
                  if not np.all(np.isfinite(scales)) else "")
                 + "Hint: on an overflow divide the scale by the factor; it must come down to where fp16 does not "
                 "overflow.")))
    got_first = int(np.argmax(finites))
    if got_first != first:
        fail(f"{what}: the first finite step is {got_first}, expected {first} (the scale halves once per overflow).")
    if not losses[-1] < 0.5 * losses[first]:
        fail(f"{what}: the loss went from {losses[first]:.3g} (first finite step) to {losses[-1]:.3g}; it should "
             "at least halve. Hint: apply the optimizer's updates on finite steps.")
    require_one_loop(training)


@pytest.mark.points(4)
def test_train_is_one_scan_in_one_jit(worker, training):
    """The loop is one lax.scan of length steps inside jax.jit, and its programs do not grow with steps."""
    failure = loop_failure(training)
    if failure:
        fail(failure)
    if not training["program"]["in_jit"]:
        fail("the scan is not inside jax.jit: train_fp16_dynamic should be one compiled program. "
             "Hint: decorate it with @partial(jax.jit, static_argnames=('steps', 'tx')).")
    held_to_a_training_step(training)


def first_step(training, name) -> dict:
    """What the loop's first step did on its own in one of FIRST_STEPS."""
    steps = training["first_steps"]
    if "error" in steps:
        fail(f"could not run one step of your loop on its own: {steps['error']}. Hint: carry the parameters "
             "through the scan as they are passed in (a dict of float32 arrays).")
    return steps["cases"][name]


@expected
def own_first_step_moves(data_seed: int, lr: float, scale: float) -> np.ndarray:
    """The sign (-1, 0, 1) of each parameter entry's move in one Adam step from a fresh state with
    the grader's own scaled fp16 gradients on problem(data_seed)."""
    def compute():
        p, x, y = problem(data_seed)
        tx = optax.adam(lr)
        g, _, _ = own_step(f32(p), *f32((x, y)), jnp.float32(scale))
        return np.sign(flat(adam_step(tx, g, tx.init(f32(p)), f32(p))[0]) - flat(f32(p))).tolist()

    return np.asarray(figure_store.stored("ex8 own first step moves", (data_seed, lr, scale), compute))


# The loop read must train the model: one step of it from 2^15, run by the grader, moves at least
# this share of the entries the grader's own Adam step moves, each the way the grader's moves (Adam's
# first step is lr times the sign of the gradient, whatever scaling or rounding came before).
HELD_MOVED = 0.5
HELD_AGREE = 0.9


def held_to_a_training_step(training):
    """The loop whose structure is judged is the one that trains the model: run by the grader on its
    own data, its first step moves the parameters as the grader's Adam step does. A loop with the
    technique's marks that computes something else earns nothing."""
    case = first_step(training, "scale 2^15")
    move = np.sign(flat(case["params_out"]) - flat(case["params_in"]))
    own = own_first_step_moves(grad_seeds()[0], training["lr"], 2.0 ** 15)
    moved = own != 0
    share = float(np.mean(move[moved] != 0)) if moved.any() else 1.0
    both = moved & (move != 0)
    agree = float(np.mean(move[both] == own[both])) if both.any() else 0.0
    if share < HELD_MOVED or agree < HELD_AGREE:
        fail(f"run by the grader on its own data from {FIRST_STEP_START['scale 2^15']}, one step of your loop moved "
             f"{share:.0%} of the parameter entries one Adam step on the fp16 gradients moves, {agree:.0%} of them "
             "the same way: the technique is judged on the loop that trains the model. Hint: make the training "
             "right first (the training checks say how): each step applies tx.update to the step's unscaled "
             "gradients.")


def unmoved(case) -> float:
    """Share of the parameter entries the step left exactly where they were."""
    return float(np.mean(flat(case["params_out"]) == flat(case["params_in"])))


@pytest.mark.points(3)
def test_training_computes_in_fp16_inside_the_scan(worker, training):
    """Every dot_general is float16 inside the scan, and each update follows its step's scaled fp16 gradients."""
    failure = loop_failure(training)
    if failure:
        fail(f"no single lax.scan of length steps={STEPS} runs the training steps (see train_is_one_scan_in_one_jit), "
             "so the fp16 compute inside it cannot be judged.")
    program = training["program"]
    dots_in, dots_all = program["dots_in_loop"], [tuple(d) for d in program["dots"]]
    not_f16 = sorted(set(dots_all) - {("float16", "float16")})
    if not_f16 or dots_in < 3 or dots_in != len(dots_all):
        fail(f"the training program has {len(dots_all)} matrix product(s) (@, jnp.dot), {dots_in} inside the scan"
             + (f", some on {not_f16} operands" if not_f16 else "") + ": expected the model's forward and backward "
             "passes inside the scan body, all in float16. Hint: each step differentiates fp16_loss * scale.")
    run = run_of(training, "recover")
    _, finites, _ = per_step(run, "train_fp16_dynamic")
    dtype_hint = scale_dtype_problem(run)
    if finites[:1].all():
        fail(f"the dots in the scan are float16, but the first step at scale {pow2(TOO_LARGE)} was finite, where fp16 "
             "overflows on this data: the parameters are updated from gradients computed some other way. "
             "Hint: each step's gradients are scaled_grads(p, x, y, ls.scale) of the fp16 model.")
    # One step on its own, from fresh Adam: an entry moves unless its gradient is exactly 0. At scale
    # 1 fp16's underflow zeroes a measured share of them; at 2^15 none.
    data_seed = grad_seeds()[0]
    own_1 = own_first_step_unmoved(data_seed, training["lr"], 1.0)
    own_15 = own_first_step_unmoved(data_seed, training["lr"], 2.0 ** 15)
    got_1, got_15 = unmoved(first_step(training, "scale 1")), unmoved(first_step(training, "scale 2^15"))
    if got_1 < own_1 / 2:
        fail(f"one step of your loop from {FIRST_STEP_START['scale 1']} moved {1 - got_1:.0%} of the parameter "
             "entries, where "
             f"fp16's underflow zeroes the gradient of {own_1:.0%} of them, which Adam then leaves in place: the "
             "update is not made from the step's fp16 gradients (an fp32 copy of the model?). Hint: update with "
             "the gradients scaled_grads(p, x, y, ls.scale) returns.")
    if got_15 > own_15 + own_1 / 2:
        fail(f"one step of your loop from {FIRST_STEP_START['scale 2^15']} left {got_15:.0%} of the parameter "
             "entries where they "
             + (f"were, as fp16's underflow without scaling does ({own_1:.0%}): the update uses gradients the scale "
                "never reached. Hint: update with the unscaled gradients of the scaled loss, the very ones `finite` "
                "is computed from." if got_15 < 1 else "were, although its gradients are finite: the update is not "
                "applied. Hint: on a finite step apply tx.update's updates to the parameters."))
    dtypes = params_of(run, "train_fp16_dynamic", "params_dtypes")
    scale_dtype = read_value(run["ls_scale_dtype"])
    if set(dtypes.values()) != {"float32"}:
        fail(f"train_fp16_dynamic returned parameters of dtypes {dtypes}; they should stay float32: the master "
             "weights take updates too small for fp16. Hint: cast to fp16 only inside the loss.")
    if scale_dtype != "float32":
        fail(f"train_fp16_dynamic returned a {scale_dtype} scale; it should stay float32. "
             + (dtype_hint or "Hint: keep DynScale.scale float32."))
    held_to_a_training_step(training)


@pytest.mark.points(3)
def test_skip_is_decided_inside_the_scan_from_the_steps_finite_flag(worker, training):
    """One step of the scan on its own: any gradient inf or NaN leaves params and moments exactly as they were."""
    failure = loop_failure(training)
    if failure:
        fail(f"no single lax.scan of length steps={STEPS} runs the training steps (see train_is_one_scan_in_one_jit), "
             "so where the skip is decided cannot be judged: it must be decided inside the loop, step by step.")
    # An inf in x makes w1's gradient NaN in any precision; 2^100 overflows only an fp16 backward
    # pass, which training_computes_in_fp16_inside_the_scan checks (its first step at 2^34 must
    # overflow): the overflow is tried only on a loop whose gradients overflow there.
    _, finites, _ = per_step(run_of(training, "recover"), "train_fp16_dynamic")
    cases = [("one inf in x", "an inf in x makes only grads['w1'] inf or NaN")]
    if not finites[:1].any():
        cases.append(("scale 2^100", "at scale 2^100 every fp16 gradient overflows"))
    for name, why in cases:
        case = first_step(training, name)
        changed = [k for k in KEYS if not np.array_equal(case["params_out"][k], case["params_in"][k])]
        moments = sum(case["others_changed"])
        if changed or moments:
            nan = any(not np.all(np.isfinite(case["params_out"][k])) for k in changed)
            fail(f"{why}, and one step of your loop from {FIRST_STEP_START[name]} "
                 + (f"changed the parameters {changed}" + (" (to inf/NaN)" if nan else "") if changed
                    else "kept the parameters")
                 + (f"{' and' if changed else ', but changed'} {moments} other carried array(s) of their shapes "
                    "(the optimizer's moments)" if moments else "")
                 + ": " + ("that is updating on an overflow. " if changed
                           else "the optimizer state changed on a skipped step. ")
                 + "Hint: finite = all_finite of every gradient leaf; when it is False keep the parameters and the "
                   "optimizer state exactly (jnp.where(finite, new, old)).")
    if unmoved(first_step(training, "scale 2^15")) == 1.0:
        fail(f"one step of your loop from {FIRST_STEP_START['scale 2^15']}, where every gradient is finite, left every "
             "parameter where it was: the step is skipped although it is finite. Hint: apply the update when finite "
             "is True.")
    held_to_a_training_step(training)
