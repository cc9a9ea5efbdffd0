"""Grader for Exercise 4: bf16-stored parameter vs fp32 master weight.

The checks never call the learner's code: graders/exercises/ex4_master_weights/probes.py does, and hands
back plain numbers. Expected values come from the grader's own step-by-step simulation with ml_dtypes (NumPy's
bfloat16), rounding exactly once per step as a bf16-stored parameter does. Besides a fixed grid,
inputs are drawn from the grading seed at the edges of rounding: exact ties between two bf16
numbers, values just above and below powers of two, negative values, and subnormal numbers for
the threshold. The named rounding mistakes (ties away from zero, ties upward, truncation, the old
value's spacing) are simulated here too, on float32 bit patterns, to say which one a result is.
"""

import math

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from graders.kit.expected import expected, or_else, recorded_ahead
from graders.kit.verdicts import fail
from graders.kit.numeric import as_scalar

BF16 = ml_dtypes.bfloat16
SMALLEST_NORMAL = float(ml_dtypes.finfo(BF16).smallest_normal)  # 2**-126, as in float32
SMALLEST_SUBNORMAL = float(ml_dtypes.finfo(BF16).smallest_subnormal)  # 2**-133: bf16 keeps 7 fraction bits
# Thresholds are powers of two computed exactly; a relative slack only forgives a float32 round trip.
THRESHOLD_RTOL = 1e-6

# (w0, lr, grad, steps): stuck (update below half the spacing), moving, moving by more than the
# update (0.002 > half of 2**-8 rounds up to a whole 2**-8 step), large and small magnitudes.
# On every case the float32 steps end away from the closed form w0 - steps*lr*grad (tests/ checks it).
GRID = [
    (1.0, 1e-2, 1.0, 50),
    (3.0, 2e-3, 1.5, 40),
    (0.5, 1e-3, -2.0, 60),
    (100.0, 0.05, 1.0, 30),
    (0.1, 1e-4, 3.0, 80),
    (1.0, 7e-3, 1.3, 45),
]


# Rounding a float32 value to bfloat16 by hand, on its bit pattern: bf16 keeps the upper 16 bits.
# "even" is what bf16 storage does (ml_dtypes, XLA: to nearest, ties to even); the others are the
# mistakes a hand-written rounding makes, named for the messages.
ROUNDINGS = {
    "away": "rounds ties away from zero (adding half a step to the magnitude, then cutting the low bits)",
    "up": "rounds ties upward, toward +infinity (floor(x + 0.5) on the steps)",
    "zero": "truncates (cuts the low 16 bits of the float32, rounding toward zero)",
}


def round_bits(x, mode: str = "even") -> float:
    """float32(x) rounded to a bfloat16 value by `mode` ("even", or a key of ROUNDINGS)."""
    bits = int(np.float32(x).view(np.uint32))
    sign, magnitude = bits & 0x80000000, bits & 0x7FFFFFFF
    low, kept = magnitude & 0xFFFF, magnitude & 0x7FFF0000
    if mode == "zero" or low < 0x8000:
        up = False
    elif low > 0x8000:
        up = True
    else:  # a tie: exactly halfway between two bf16 numbers
        up = {"even": bool(kept & 0x10000), "away": True, "up": sign == 0}[mode]
    return float(np.uint32(sign | (kept + (0x10000 if up else 0))).view(np.float32))


@expected
def bf16_steps(w0, lr, grad, steps) -> list[float]:
    """Scheme (a) simulated. The update may be formed in fp32 (from the exact product, or as
    float32(lr) * float32(grad)) or first rounded to bf16 (as JAX does for a bf16 array minus a
    Python float); each way is a correct bf16-stored parameter, so every one of them is accepted."""
    results = []
    for update in (np.float32(lr * grad), np.float32(BF16(lr * grad)),
                   np.float32(BF16(np.float32(BF16(lr)) * np.float32(BF16(grad)))),
                   np.float32(np.float32(lr) * np.float32(grad))):
        w = BF16(w0)
        for _ in range(steps):
            w = BF16(np.float32(w) - update)
        results.append(float(w))
    return results


@expected
def bf16_steps_rounded(w0, lr, grad, steps, mode: str) -> float:
    """Scheme (a) with a hand-written rounding `mode` (see ROUNDINGS), or "old spacing": rounded
    to nearest (ties to even) on the spacing of w *before* the step, as if the new value stayed in
    w's power of two. What a wrong rounding returns, to name it."""
    update = np.float32(lr * grad)
    w = round_bits(w0, "even" if mode == "old spacing" else mode)
    for _ in range(steps):
        new = np.float32(np.float32(w) - update)
        if mode == "old spacing":
            step = spacing_above(w)
            w = float(BF16(np.round(np.float64(new) / step) * step))
        else:
            w = round_bits(new, mode)
    return w


def spacing_above(w) -> float:
    """The gap between a normal nonzero bf16 number w and the next one further from zero
    (exact: frexp reads w's power of two off its bits, where a log2 may round)."""
    return math.ldexp(1.0, math.frexp(w)[1] - 8)


# Cases drawn from the grading seed at the edges of rounding, as (w0, lr, grad, steps). Every lr
# and grad is a short binary fraction, so lr * grad is the same number in float32 and in bf16 and
# every spelling of the update takes the same steps. All stay among normal numbers: XLA on CPU
# flushes subnormal ones to zero, which the stub leaves open for the steps.
#   ties: the update is 1.5 steps of bf16's spacing, so every w - u lands halfway between two bf16
#     numbers until w crosses the power of two below it (the spacing halves there). w0's last bit is
#     1, so ties to even and ties toward zero part at the first step, whatever the sign;
#   negative ties: the same from a negative w moving toward zero (ties upward go toward zero there,
#     ties away from zero the other way);
#   crossing up: from just below a power of two, upward by 1.25 of the spacing below it, which is
#     0.625 of the spacing above it: every step after the crossing rounds up to a whole step.
def edge_cases(seed: int) -> list[tuple]:
    r = np.random.default_rng([seed, 4])
    cases = []
    for sign in (1.0, -1.0):
        e, j, g = int(r.integers(-20, 21)), 2 * int(r.integers(12, 50)) + 1, int(r.integers(-2, 3))
        w0 = sign * 2.0 ** e * (1 + j / 128)
        lr, grad = 3 * 2.0 ** (e - 8 - g), sign * 2.0 ** g  # u = 1.5 * 2**(e - 7), toward zero
        cases.append((w0, lr, grad, int(j / 1.5) + int(r.integers(2, 8))))
    e, k, g = int(r.integers(-20, 21)), int(r.integers(1, 9)), int(r.integers(-2, 3))
    cases.append((2.0 ** e * (1 - k / 256), 5 * 2.0 ** (e - 10 - g), -(2.0 ** g), int(r.integers(k + 4, k + 20))))
    return cases


def master_cases(seed: int) -> list[tuple]:
    """(w0, lr, grad, steps) for the float32 master, drawn from the grading seed: w0 with all 24
    significant bits random, and an update of (k + 1/4) float32 spacings of w0 (lr and grad short
    binary fractions, so lr * grad is exact in every spelling), so that every step rounds and the
    closed form ends away from the steps; one of each sign."""
    r = np.random.default_rng([seed, 6])
    cases = []
    for sign in (1.0, -1.0):
        e, k, g = int(r.integers(-20, 21)), int(r.integers(1, 20)), int(r.integers(-2, 3))
        w0 = float32_exact(sign * (1 + r.random()) * 2.0 ** e)
        lr, grad = (4 * k + 1) * 2.0 ** (e - 25 - g), sign * 2.0 ** g  # u = (k + 1/4) * 2**(e - 23)
        cases.append((w0, lr, grad, int(r.integers(10, 60))))
    return cases


def fp32_updates(lr, grad) -> tuple:
    """The update lr * grad in float32: rounded once from the exact product, or formed as
    float32(lr) * float32(grad) in float32 -- both are correct spellings of the step."""
    return (np.float32(lr * grad), np.float32(np.float32(lr) * np.float32(grad)))


@expected
def fp32_steps(w0, lr, grad, steps) -> set[float]:
    """Scheme (b) simulated: every step rounds w - update to float32, for each spelling of the update."""
    results = set()
    for update in fp32_updates(lr, grad):
        w = np.float32(w0)
        for _ in range(steps):
            w = np.float32(w - update)
        results.add(float(w))
    return results


@expected
def fp32_closed_forms(w0, lr, grad, steps) -> list[float]:
    """w0 - steps * lr * grad computed at once, with no per-step rounding: what a closed form returns."""
    return [float(np.float32(w0 - steps * lr * grad)),
            float(np.float32(np.float32(w0) - np.float32(steps * lr * grad))),
            float(np.float32(np.float32(w0) - np.float32(steps) * np.float32(lr * grad)))]


@expected
def threshold(w) -> float:
    """Half the gap between bf16(w) and the next smaller bf16 number, read off the bit patterns
    with ml_dtypes (exact for subnormals too: NumPy flushes nothing to zero)."""
    stored = np.array(BF16(w))
    below = (stored.view(np.uint16) - np.uint16(1)).view(BF16)  # next smaller positive bf16, or 0
    return (float(stored) - float(below)) / 2


@expected
def threshold_rounded(w, mode: str) -> float:
    """The threshold with w rounded to bf16 by a hand-written rounding `mode` (see ROUNDINGS)."""
    return threshold(round_bits(w, mode))


def float32_exact(w: float) -> float:
    """w cut to float32's 24 significant bits, so that rounding it to bf16 from a Python float or
    from a float32 is the same question."""
    return float(np.float32(w))


def threshold_draws(seed: int) -> dict[str, tuple]:
    """The w each threshold check adds to its fixed ones, drawn from the grading seed:
    "spacing": w with random significant bits and powers of two, small and large;
    "rounded": exact ties just above a power of two (to even: down onto it; away from zero: up),
      w between such a tie and the next bf16 number (truncation: down onto the power), and w just
      below a power of two (up onto it); one power is 2**-125, the lowest whose spacing below is
      still the normal one;
    "subnormal": subnormal bf16 numbers, exact ties between two of them, and the smallest
      subnormal and normal numbers."""
    r = np.random.default_rng([seed, 5])
    spacing = [float32_exact((1 + r.random()) * 2.0 ** int(e)) for e in r.integers(-60, 61, size=4)]
    spacing += [2.0 ** int(e) for e in r.integers(-100, 101, size=2)]
    rounded = []
    for e in [-125, *(int(e) for e in r.integers(-100, 121, size=2))]:
        rounded += [2.0 ** e * (1 + 2**-8), 2.0 ** e * (1 + 3 * 2**-9), 2.0 ** e * (1 - 2**-10)]
    k = [int(v) for v in r.integers(2, 127, size=3)]
    subnormal = [k[0] * SMALLEST_SUBNORMAL, (k[1] + 0.5) * SMALLEST_SUBNORMAL, (k[2] + 0.5) * SMALLEST_SUBNORMAL,
                 SMALLEST_SUBNORMAL, SMALLEST_NORMAL]
    return {"spacing": tuple(spacing), "rounded": tuple(rounded), "subnormal": tuple(subnormal)}


def threshold_of_unrounded(w) -> float:
    """Half the gap below w computed from w's own power of two, without rounding w to bf16 first."""
    exponent = math.floor(math.log2(w))
    return 2.0 ** (exponent - 9) if w == 2.0 ** exponent else 2.0 ** (exponent - 8)


def threshold_gap_above(w) -> float:
    """Half the gap *above* bf16(w): right except at powers of two."""
    return 2.0 ** (math.floor(math.log2(float(BF16(w)))) - 8)


def dtype_of(value, what: str):
    """The dtype jnp.asarray(value) has, found by tracing it (jax.eval_shape): the same dtype and
    the same errors, with no JAX backend started in this process (30-odd ms that nothing else here
    needs under --sandbox)."""
    try:
        return jax.eval_shape(lambda: jnp.asarray(value)).dtype
    except (TypeError, ValueError):
        fail(f"{what}: expected a JAX scalar, got {type(value).__name__}.")


@pytest.mark.points(1)
def test_bf16_result_is_bfloat16(worker):
    """sgd_bf16 and w_bf16 are bfloat16 scalars."""
    for what, value in (("sgd_bf16(1.0, 1e-2, 1.0, 3)", worker.sgd_bf16(1.0, 1e-2, 1.0, 3)),
                        ("w_bf16", worker.module_value("w_bf16"))):
        dtype = dtype_of(value, what)
        if dtype != jnp.bfloat16:
            fail(f"{what} has dtype {dtype}, expected bfloat16: in scheme (a) the parameter is stored in bf16. "
                 "Hint: round with .astype(jnp.bfloat16) after every step.")


@pytest.mark.points(1)
def test_master_result_is_float32(worker):
    """sgd_fp32_master and w_master are float32 scalars."""
    for what, value in (("sgd_fp32_master(1.0, 1e-2, 1.0, 3)", worker.sgd_fp32_master(1.0, 1e-2, 1.0, 3)),
                        ("w_master", worker.module_value("w_master"))):
        dtype = dtype_of(value, what)
        if dtype != jnp.float32:
            fail(f"{what} has dtype {dtype}, expected float32: the master weight must keep fp32 precision "
                 "(a master kept in bf16 loses the small updates just like scheme (a)).")


@pytest.mark.points(1)
def test_chapter_case_values(worker):
    """w_bf16 is still 1.0 after 100 steps of 1e-3, w_master is about 0.9."""
    w_bf16 = as_scalar(worker.module_value("w_bf16"), "w_bf16")
    w_master = as_scalar(worker.module_value("w_master"), "w_master")
    expected_master = min(fp32_steps(1.0, 1e-3, 1.0, 100))
    recorded_ahead(lambda: bf16_steps_rounded(1.0, 1e-3, 1.0, 100, "zero"))
    if w_bf16 != 1.0:
        fail(f"w_bf16 = {w_bf16:.8g}, expected 1.0: each 1e-3 step is under half the bf16 spacing just below 1.0 "
             "(2**-8), so it is rounded away. "
             + ("That is 0.9 rounded to bf16 once at the end: the steps were taken in fp32. "
                if abs(w_bf16 - float(BF16(0.9))) < 1e-9 else "")
             + (f"That is what a rounding that {ROUNDINGS['zero']} gives: 1 - 1e-3 is nearer 1.0 than 1 - 2**-8. "
                if w_bf16 == or_else(lambda: bf16_steps_rounded(1.0, 1e-3, 1.0, 100, "zero"), None) else "")
             + "Hint: round the parameter to bf16 after every step.")
    if not abs(w_master - expected_master) <= 1e-5:  # a NaN is wrong too
        fail(f"w_master = {w_master:.8g}, expected {expected_master:.8g} (1 - 100 * 1e-3 in fp32). "
             "Hint: keep the master weight in float32 and subtract lr * grad each step.")


@pytest.mark.points(3)
def test_bf16_matches_step_by_step_rounding(worker, seed):
    """sgd_bf16 equals the grader's simulation where bf16 sticks, moves, overshoots, lands on ties, crosses powers of two, and is negative."""
    cases = GRID + edge_cases(seed)
    # every call asked at once, in order: under --sandbox the learner's code runs the next case while
    # this process reads the last reply; without it each call is made as it is asked
    asked = [(case, worker.ahead.sgd_bf16(*case)) for case in cases]
    got = {case: as_scalar(read(), "sgd_bf16({!r}, {!r}, {!r}, {})".format(*case)) for case, read in asked}
    accepted = {case: bf16_steps(*case) for case in cases}
    recorded_ahead(lambda: [bf16_steps_rounded(*case, mode) for case in cases for mode in (*ROUNDINGS, "old spacing")])
    wrong = [case for case in cases if got[case] not in accepted[case]]
    if not wrong:
        return
    w0, lr, grad, steps = case = wrong[0]
    exact = w0 - steps * lr * grad

    def explains(mode) -> bool:
        """Whether a rounding mistake gives every result: where it would be right, so must they be."""
        wrongly = or_else(lambda: {c: bf16_steps_rounded(*c, mode) for c in cases}, None)
        return wrongly is not None and got[case] == wrongly[case] and all(
            got[c] == wrongly[c] or (got[c] in accepted[c] and wrongly[c] in accepted[c]) for c in cases)

    mistake = next((mode for mode in (*ROUNDINGS, "old spacing") if explains(mode)), None)
    if np.isclose(got[case], float(BF16(exact)), rtol=0, atol=1e-12) or np.isclose(got[case], exact, rtol=1e-6):
        why = ("That is the exact result w0 - steps*lr*grad (rounded once): the steps were not each rounded "
               "to bf16. Hint: round after every step; a closed form cannot show what bf16 storage loses.")
    elif mistake in ROUNDINGS:
        why = (f"That is what a rounding that {ROUNDINGS[mistake]} gives. bf16 storage rounds to the nearest "
               "bf16 number and an exact tie to the one whose last bit is 0 (ties to even). Hint: let "
               ".astype(jnp.bfloat16) round, or round ties to even by hand.")
    elif mistake:
        why = ("That is rounding on the spacing of w before the step: when w - lr*grad crosses a power of two, "
               "the bf16 spacing there is twice or half as large. Hint: let .astype(jnp.bfloat16) round.")
    else:
        why = "Hint: start from bf16(w0) and round w - lr*grad to bf16 after every step."
    fail(f"sgd_bf16({w0!r}, {lr!r}, {grad!r}, {steps}) = {got[case]:.8g}, expected {accepted[case][0]:.8g} "
         f"(step-by-step bf16 rounding, to nearest with ties to even). {why}")


@pytest.mark.points(2)
def test_master_matches_float32_simulation(worker, seed):
    """sgd_fp32_master equals the grader's step-by-step float32 simulation bit for bit on the grid and on drawn cases."""
    for w0, lr, grad, steps in GRID + master_cases(seed):
        call = f"sgd_fp32_master({w0}, {lr}, {grad}, {steps})"
        got = as_scalar(worker.sgd_fp32_master(w0, lr, grad, steps), call)
        accepted = fp32_steps(w0, lr, grad, steps)
        recorded_ahead(lambda: (bf16_steps(w0, lr, grad, steps), fp32_closed_forms(w0, lr, grad, steps)))
        if got in accepted:
            continue
        expected = min(accepted)
        if got in bf16_steps(w0, lr, grad, steps):
            why = "That is what the bf16 scheme gives: the master weight is being rounded to bf16. "
        elif got in or_else(lambda: fp32_closed_forms(w0, lr, grad, steps), ()):
            why = ("That is the closed form w0 - steps*lr*grad rounded to float32 once: a float32 master rounds "
                   "after every step, and those roundings add up. Hint: take the steps one by one (lax.fori_loop).")
        else:
            why = "Hint: keep w in float32 and subtract lr * grad once per step; only the compute copy would be bf16."
        fail(f"{call} = {got!r}, expected {expected!r} ({expected - got:+.3g} away; the simulation rounds to "
             f"float32 after each of the {steps} steps). {why}")


def threshold_mistake(got: dict, ws) -> str:
    """The named mistake whose values match the learner's on every w, or a hint."""
    def matches(wrong) -> bool:
        return or_else(lambda: all(np.isclose(got[v], wrong(v), rtol=THRESHOLD_RTOL, atol=0) for v in ws), False)

    if matches(lambda v: 2 * threshold(v)):
        return "That is the whole gap; an update is rounded back only while it is under *half* of it."
    if matches(lambda v: threshold(1.0)):
        return "That is the value for w = 1.0 every time: the spacing scales with w's power of two."
    # a threshold below the smallest normal number is itself subnormal (for w that is, and for w
    # just above 2**-125): jnp arithmetic on XLA's CPU makes it 0
    subnormal = [v for v in ws if threshold(v) < SMALLEST_NORMAL]
    right = {v for v in ws if np.isclose(got[v], threshold(v), rtol=THRESHOLD_RTOL, atol=0)}
    if (subnormal and any(got[v] == 0.0 for v in subnormal)
            and not right & set(subnormal) and right == set(ws) - set(subnormal)):
        return ("Subnormal numbers were flushed to zero: XLA on CPU does that, so jnp arithmetic cannot see "
                "them (nor a gap below 2**-126 between two normal numbers). Hint: work in NumPy, "
                "np.asarray(w, jnp.bfloat16) is an exact bf16 value (ml_dtypes).")
    for mode, what in ROUNDINGS.items():
        if matches(lambda v: threshold_rounded(v, mode)):
            return (f"w was rounded to bf16 by a rounding that {what}: just above a power of two that lands w on "
                    "the wrong side of it, where the spacing below differs. bf16 rounds to nearest, ties to even. "
                    "Hint: np.asarray(w, jnp.bfloat16) rounds as bf16 storage does.")
    if matches(threshold_of_unrounded):
        return ("That is the spacing at w's own power of two: w was not rounded to bfloat16 first. "
                "Hint: round w to bf16, then look at the gap below that stored value.")
    if matches(threshold_gap_above):
        return ("Right everywhere except at powers of two: that is half the gap *above* w. Just below a "
                "power of two the spacing halves, and the gap below w is what counts for w - u.")
    return "Hint: find the next smaller bfloat16 number below bf16(w) (np.nextafter) and halve the gap."


def check_thresholds(worker, ws, note=None):
    asked = [(w, worker.ahead.bf16_rounding_threshold(w)) for w in ws]  # at once, in order
    got = {w: as_scalar(read(), f"bf16_rounding_threshold({w!r})") for w, read in asked}
    wrong = [w for w in ws if not np.isclose(got[w], threshold(w), rtol=THRESHOLD_RTOL, atol=0)]
    recorded_ahead(lambda: [threshold_rounded(w, mode) for w in ws for mode in ROUNDINGS] + [threshold(1.0)])
    if wrong:
        w = wrong[0]
        fail(f"bf16_rounding_threshold({w!r}) = {got[w]:.6g}, expected {threshold(w):.6g} "
             f"(bf16({w!r}) = {float(BF16(w)):.6g}). {threshold_mistake(got, ws)}")


@pytest.mark.points(2)
def test_rounding_threshold_matches_bf16_spacing(worker, seed, note):
    """bf16_rounding_threshold(w) is half the gap to the next smaller bf16 number, for many w."""
    fixed = (1.5, 3.0, 0.1, 1000.0, 0.75, 6.5e-3, 1.0, 2.0)  # the last two are powers of two
    check_thresholds(worker, fixed + threshold_draws(seed)["spacing"])
    note(f"Why (a) never moves: just below 1.0 bf16 numbers are 2**-8 = {2**-8:.4f} apart, so any update under "
         f"{threshold(1.0):.5f} (half of it) is rounded away; 1e-3 is, every step.")


@pytest.mark.points(1)
def test_rounding_threshold_rounds_w_to_bf16_first(worker, seed):
    """For w that bf16 rounds onto a power of two or off it (ties to even), the gap is read below the stored value."""
    # 0.5 + 2**-10 is stored as 0.5 (rounded down), 1 - 2**-10 as 1.0 (rounded up), 3 - 2**-8 as 3.0:
    # below each stored value the gap is not the one at w's own power of two.
    check_thresholds(worker, (0.5 + 2**-10, 1 - 2**-10, 3 - 2**-8, 1.5) + threshold_draws(seed)["rounded"])


@pytest.mark.points(1)
def test_rounding_threshold_below_the_smallest_normal(worker, seed):
    """Subnormal bf16 numbers, and the smallest normal one, have the subnormal spacing 2**-133."""
    ws = (SMALLEST_SUBNORMAL, 5 * SMALLEST_SUBNORMAL, 100 * SMALLEST_SUBNORMAL,
          SMALLEST_NORMAL, SMALLEST_NORMAL - SMALLEST_SUBNORMAL / 4)  # the last rounds up to the smallest normal
    check_thresholds(worker, ws + threshold_draws(seed)["subnormal"])
