"""Grader for Exercise 8: dynamic loss scaling for fp16.

The checks never call the learner's code: graders/probes/ex8_loss_scaling.py does, and hands back
plain data (numbers, float64 arrays, dtype names, summaries of the traced programs). Expected
values come from the grader's own computations: float64 NumPy gradients of the model, the
grader's own JAX copy of the fp16 model (to measure what fp16 does to the gradients), a
Python step-by-step simulation of the scale rule, and a Python loop of training steps with an
explicit `if` for the skip.
"""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from graders.learner import fail
from graders.numeric import as_array, assert_close, fmt, is_close, ordinal, rng
from graders.probes.ex8_loss_scaling import KEYS, read_value

# N is large so that one example's share of the loss (LOSS_WEIGHT / (N*K)) lies deep in fp16's
# subnormal range; D, H, K are small to keep compiles short; every axis has a distinct size.
N, D, H, K = 384, 5, 24, 2
LOSS_WEIGHT = 5e-5  # the given model's weight (part of the model the exercise fixes)
F16_TINY = float(np.finfo(np.float16).tiny)

# At 2^15 the only error left is fp16's rounding in the forward pass (~5e-4 relative here);
# the chapter's table puts it under 1%. Unscaled, 4-20% of the entries underflow to 0.
REL_ERR_SCALED = 0.01
# Data sets with clear margins (measured over seeds 20-44): GRAD_SEED loses 19% of its entries
# at scale 1 and overflows from 2^31 on, so 2^32 overflows with room to spare (some seeds do not).
GRAD_SEED, GRAD_SEED_2, TRACE_SEED, TRAIN_SEED = 22, 27, 25, 31
# Training: Adam, a scale far too large to start with, and enough steps to grow it once at the
# default period of 50 after the first skips.
LR = 1e-2
STEPS = 64
TOO_LARGE = 2.0 ** 34   # overflows for the first few steps on this data
HOPELESS = 2.0 ** 100   # still overflows after STEPS halvings: every step is skipped
# After training, against the simulation: both sides run the same fp16 model, but XLA fuses
# each program its own way, so fp16 roundings differ a little and Adam carries them along
# (measured for correct solutions: parameters 5.8e-5, losses 1.6e-5 relative to the largest).
# Keeping the optimizer state changed on the skipped steps moves them by 1.4e-2 and 6.7e-2.
PARAM_RTOL = 1e-3
LOSS_RTOL = 1e-3


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


# ---------------------------------------------------------------- reading the learner's results

def scale_state(value) -> tuple[float, int, object, object]:
    """(scale, good_steps, scale dtype, good_steps dtype) from a probe's reading of a DynScale."""
    scale, good, s_dtype, g_dtype = value
    return scale, good, jnp.dtype(s_dtype), jnp.dtype(g_dtype)


# ---------------------------------------------------------------- the scale rule, simulated

def rule(scale, good, finite, period, factor, min_scale):
    """One step of the rule in float32, as the learner's scale is stored."""
    scale, factor = np.float32(scale), np.float32(factor)
    if not finite:
        return float(max(np.float32(scale / factor), np.float32(min_scale))), 0
    if good + 1 >= period:
        return float(np.float32(scale * factor)), 0
    return float(scale), good + 1


def check_transitions(worker, flags, scale, period, factor, min_scale):
    """Feed the learner's dyn_scale_step each of the simulation's states in turn, so a message
    names the one transition that went wrong."""
    good = 0
    for i, finite in enumerate(flags):
        expected = rule(scale, good, finite, period, factor, min_scale)
        call = f"dyn_scale_step(DynScale({scale:g}, {good}), finite={finite}, period={period}, factor={factor}, min_scale={min_scale})"
        got_scale, got_good, s_dtype, _ = scale_state(
            worker.dyn_scale_step(call, scale, good, finite, period, factor, min_scale))
        if (got_scale, got_good) != expected:
            fail(f"{call} (step {i} of the sequence {[int(f) for f in flags]}) returned "
                 f"({got_scale:g}, {got_good}), expected ({expected[0]:g}, {expected[1]}). "
                 + transition_mistake(scale, good, finite, period, factor, min_scale,
                                      got_scale, got_good, expected, s_dtype))
        scale, good = expected


def transition_mistake(scale, good, finite, period, factor, min_scale, got_scale, got_good, expected, s_dtype):
    if not np.isfinite(got_scale) or s_dtype == jnp.float16:
        return ("The scale is held in fp16, where anything above 65504 overflows to inf. "
                "Hint: keep DynScale.scale float32.")
    if finite and good + 1 < period and np.isclose(got_scale, scale * factor):
        return (f"That is growing on every finite step: the period is ignored. Grow only when good_steps + 1 "
                f"reaches period={period}.")
    if finite and good + 1 >= period and got_scale == scale:
        return (f"The scale did not grow although this is the {ordinal(period)} finite step in a row"
                + (" (is the period hard-coded to 50?)" if period != 50 else "") + ". Hint: compare "
                "good_steps + 1 with the `period` argument.")
    if finite and good + 1 >= period and np.isclose(got_scale, scale * factor) and got_good != 0:
        return "The scale grew, but the counter was not reset: after growing, good_steps goes back to 0."
    if finite and got_scale == scale and got_good != good + 1:
        return "A finite step adds one to good_steps."
    if not finite and got_scale < min_scale:
        return f"That is shrinking below min_scale={min_scale}: the scale is max(scale / factor, min_scale)."
    if not finite and got_scale == expected[0] and got_good != 0:
        return "The scale shrank, but the counter was not reset: after an overflow, good_steps goes to 0."
    if not finite and got_scale >= scale:
        return f"On an overflow the scale must shrink: scale / factor (factor={factor}), at least min_scale."
    return "Hint: finite -> count, grow by factor at period, reset; not finite -> max(scale / factor, min_scale), reset."


# ---------------------------------------------------------------- dyn_scale_step

@pytest.mark.points(2)
def test_scale_grows_exactly_at_period(worker):
    """Finite steps count up; at `period` the scale grows by `factor` and the counter resets."""
    check_transitions(worker, [True] * 7, 2.0 ** 10, period=3, factor=2.0, min_scale=1.0)
    check_transitions(worker, [True] * 11, 1.5, period=5, factor=3.0, min_scale=1.0)
    check_transitions(worker, [True] * 3, 4.0, period=1, factor=2.0, min_scale=1.0)


@pytest.mark.points(1)
def test_scale_shrinks_and_counter_resets_on_overflow(worker):
    """A non-finite step divides the scale by `factor` and sends the counter back to 0."""
    # Three good steps, an overflow, then three more must not grow the scale (period 4).
    flags = [True, True, True, False, True, True, True, True, False, False, True]
    check_transitions(worker, flags, 2.0 ** 12, period=4, factor=2.0, min_scale=1.0)
    check_transitions(worker, [False, True, False], 3.0 * 2 ** 10, period=6, factor=4.0, min_scale=1.0)


@pytest.mark.points(1)
def test_scale_never_goes_below_min_scale(worker):
    """Repeated overflows stop at min_scale, also when min_scale is not a power of the factor."""
    check_transitions(worker, [False] * 4, 8.0, period=3, factor=2.0, min_scale=2.0)
    check_transitions(worker, [False] * 3, 10.0, period=3, factor=2.0, min_scale=3.0)
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
        if (got, got_good) != expected:
            fail(f"{call} returned ({got:g}, {got_good}), expected ({expected[0]:g}, {expected[1]}).")


@pytest.mark.points(2)
def test_scale_step_runs_under_jit_and_inside_scan(worker):
    """The rule decides with data, not Python: it runs under jax.jit and as the body of lax.scan."""
    flags = [True, True, True, False, True, True, False, False, False, True, True, True, True]
    period, factor, min_scale, s0 = 3, 2.0, 4.0, 64.0
    expected, scale, good = [], s0, 0
    for f in flags:
        scale, good = rule(scale, good, f, period, factor, min_scale)
        expected.append((scale, good))

    got = scale_state(worker.dyn_scale_step_jit("jax.jit(dyn_scale_step)", 16.0, 2, True, period, factor, min_scale))[:2]
    if got != rule(16.0, 2, True, period, factor, min_scale):
        fail(f"under jax.jit, dyn_scale_step(DynScale(16, 2), finite=True, period=3) returned {got}, expected "
             f"{rule(16.0, 2, True, period, factor, min_scale)}.")

    scales, goods = worker.dyn_scale_step_scan(flags, s0, period, factor, min_scale)
    got = list(zip(np.asarray(scales, np.float64).tolist(), np.asarray(goods).tolist()))
    if got != expected:
        k = next(i for i, (a, b) in enumerate(zip(got, expected)) if a != b)
        fail(f"inside lax.scan over finite flags {[int(f) for f in flags]} (period={period}, factor={factor}, "
             f"min_scale={min_scale}, from scale {s0:g}), step {k} gave {got[k]}, expected {expected[k]}.")


# ---------------------------------------------------------------- all_finite

@pytest.mark.points(1)
def test_all_finite_checks_every_leaf(worker):
    """True only when every leaf is finite; an inf or a NaN in any one leaf (the last too) is found."""
    ok = {"a": jnp.ones((3, 2)), "b": (jnp.arange(5.0), jnp.zeros((), jnp.float16)), "c": jnp.full((4,), -2.5)}
    cases = [("every leaf finite", ok, True)]
    for path, bad in ((("a",), jnp.ones((3, 2)).at[2, 1].set(jnp.inf)),
                      (("b", 0), jnp.arange(5.0).at[0].set(jnp.nan)),
                      (("c",), jnp.full((4,), -2.5).at[3].set(-jnp.inf))):
        tree = {"a": ok["a"], "b": ok["b"], "c": ok["c"]}
        if len(path) == 2:
            tree["b"] = (bad, ok["b"][1])
        else:
            tree[path[0]] = bad
        cases.append((f"a non-finite entry in leaf {path}", tree, False))
    for what, tree, expected in cases:
        for how, jit in (("all_finite", False), ("jax.jit(all_finite)", True)):
            got = worker.all_finite(tree, jit, f"{how} with {what}")
            if got != expected:
                fail(f"{how} returned {got} with {what}, expected {expected}. "
                     "Hint: look at every leaf (jax.tree.leaves) and every entry (jnp.isfinite).")


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


def own_fp16_grads(seed: int, scale: float) -> np.ndarray:
    p, x, y = problem(seed)
    return flat(own_step(f32(p), *f32((x, y)), jnp.float32(scale))[0])


@pytest.fixture(scope="module")
def grads_program(worker):
    """The operand dtypes of each dot_general of the live traced scaled_grads (a decoy that is
    computed and discarded is not in it), or the message saying why it cannot be traced."""
    p, x, y = problem(TRACE_SEED)
    program = worker.scaled_grads_program(f32(p), *f32((x, y)), 2.0 ** 15)
    return program["error"] if "error" in program else [tuple(d) for d in program["dots"]]


def fp16_verdict(program) -> str | None:
    """Why the program is not an fp16 computation of the gradients, or None when it is."""
    if isinstance(program, str):
        return program
    dots = program
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


def fp16_failure(worker, grads_program) -> str | None:
    """Why scaled_grads is not an fp16 computation doing the work, or None when it is."""
    verdict = fp16_verdict(grads_program)
    if verdict:
        return verdict
    # The dots must also do the work: an fp32 model written without dot_general, plus the fp16
    # gradients times zero, has only float16 dots but none of fp16's underflow.
    got, true, _, _, call = learner_grads(worker, GRAD_SEED, 1.0)
    own = zero_share(own_fp16_grads(GRAD_SEED, 1.0), true)
    if zero_share(got, true) < own / 2:
        return (f"the float16 matrix products are there, but the gradients do not show fp16's underflow: {call} has "
                f"{zero_share(got, true):.1%} zeros where fp16 gives {own:.1%}, so the gradients come from another "
                "computation. Hint: return the gradients of the given fp16_loss, nothing else.")
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
    got, true, _, _, call = learner_grads(worker, GRAD_SEED, 1.0)
    own = zero_share(own_fp16_grads(GRAD_SEED, 1.0), true)
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
    own_err, err = rel_err(own_fp16_grads(GRAD_SEED, 1.0), true), rel_err(got, true)
    if not err <= 2 * own_err:
        fail(f"{call}: {share:.1%} of the gradient entries are 0 where the float64 gradient is not, but the "
             f"gradients are {err:.2e} away from it (relative error), where fp16 with its underflow is {own_err:.2e} "
             "away. Your gradients are not computed in fp16. Hint: differentiate the given fp16_loss (it casts "
             "to float16) and keep the model as given.")


@pytest.mark.points(2)
def test_grads_at_scale_2_15_keep_every_entry_within_1_percent(worker, grads_program, note):
    """With scale 2^15 no entry underflows and the unscaled gradients are within 1% of float64."""
    scale = 2.0 ** 15
    for seed in (GRAD_SEED, GRAD_SEED_2):
        got, true, _, _, call = learner_grads(worker, seed, scale)
        share, err = zero_share(got, true), rel_err(got, true)
        if seed == GRAD_SEED:
            note(f"scale 2^15: {share:.1%} underflowed, relative error {err:.2e} (the chapter's bound: 1%).")
        if share == 0 and err < REL_ERR_SCALED:
            continue
        if rel_err(got / scale, true) < REL_ERR_SCALED:
            fail(f"{call}: the gradients are {scale:g} times too big ({fmt(got)} vs {fmt(true)}). That is "
                 "forgetting to unscale: divide each gradient by the scale (in fp32) after differentiating.")
        if share > 0:
            fail(f"{call}: {share:.1%} of the gradient entries are still 0 (relative error {err:.2e}), as without "
                 "scaling: the fp16 backward pass never saw the scale. That is scaling after differentiating "
                 "(or multiplying the scale in and dividing it out before fp16 sees it). Hint: differentiate "
                 "lambda p: fp16_loss(p, x, y) * scale, then divide the gradients by scale.")
        fail(f"{call}: relative error {err:.2e} against the float64 gradient, expected under {REL_ERR_SCALED:.0%} "
             f"({fmt(got)} vs {fmt(true)}). Hint: grad of fp16_loss * scale, divided by scale.")
    require_fp16(worker, grads_program)


@pytest.mark.points(1)
def test_grads_at_scale_2_32_report_not_finite(worker):
    """With scale 2^32 the fp16 backward overflows and finite is False; at 2^15 it is True."""
    assert not np.all(np.isfinite(own_fp16_grads(GRAD_SEED, 2.0 ** 32))), "grader: fp16 should overflow at 2^32 here"
    for scale, expected in ((2.0 ** 32, False), (2.0 ** 15, True)):
        got, _, _, finite, call = learner_grads(worker, GRAD_SEED, scale)
        flag = read_value(finite)
        if flag != expected:
            overflowed = not np.all(np.isfinite(got))
            fail(f"{call} reported finite={flag}, expected {expected}"
                 + (f": {int(np.sum(~np.isfinite(got)))} gradient entries are inf or NaN. " if overflowed and flag else ". ")
                 + ("At 2^32 the scaled cotangents exceed fp16's 65504 and become inf, so the scale must be "
                    "applied before differentiating; " if not overflowed and scale > 2 ** 16 else "")
                 + "Hint: finite = all_finite(grads).")


@pytest.mark.points(1)
def test_grads_come_back_in_float32(worker, grads_program):
    """The gradients have the parameters' dtype, float32, whatever the compute dtype."""
    _, _, dtypes, _, call = learner_grads(worker, GRAD_SEED, 2.0 ** 15)
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


def simulate_training(p, x, y, scale, steps, tx, mistake=None):
    """The grader's loop: Python `if` for the skip, the rule in Python. `mistake` simulates a
    named wrong idea so that its message can be recognised."""
    opt, good, out = tx.init(p), 0, {"scales": [], "finites": [], "losses": []}
    for _ in range(steps):
        g, finite, loss = own_step(p, x, y, jnp.float32(scale))
        finite = bool(finite)
        out["scales"].append(scale), out["finites"].append(finite), out["losses"].append(float(loss))
        if finite or mistake == "update_on_overflow":
            p, opt = adam_step(tx, g, opt, p)
        elif mistake == "state_changes_on_skip":
            _, opt = adam_step(tx, jax.tree.map(jnp.zeros_like, g), opt, p)
        scale, good = rule(scale, good, finite, 50, 2.0, 1.0)
    out["params"], out["flat"], out["scale"], out["good"] = p, flat(p), scale, good
    return out


@pytest.fixture(scope="module")
def training(worker):
    """The learner's loop run once from a scale far too large and once from a hopeless one (one
    compile), the grader's simulation of the first, and summaries of the traced program (or the
    message saying why it cannot be traced)."""
    p, x, y = problem(TRAIN_SEED)
    p, x, y = f32(p), *f32((x, y))
    tx = optax.adam(LR)
    reply = worker.train(p, x, y, [("recover", TOO_LARGE), ("hopeless", HOPELESS)], STEPS, LR, [STEPS, STEPS + 13])
    return {"p": p, "x": x, "y": y, "tx": tx, "runs": reply["runs"], "programs": reply["programs"],
            "expected": simulate_training(p, x, y, TOO_LARGE, STEPS, tx)}


def programs(training) -> dict:
    if isinstance(training["programs"], str):
        fail(training["programs"])
    return training["programs"]


def require_one_scan(training):
    """A loop's numbers count only when they come from the loop the exercise asks for."""
    if isinstance(training["programs"], str) or programs(training)[STEPS]["scans"] != 1:
        fail(f"the numbers of this loop are not produced by one lax.scan of length steps={STEPS}, so they do not "
             "show the technique (see train_is_one_scan_in_one_jit). Hint: write the step as a scan body "
             "carrying (params, optimizer state, DynScale).")


def pow2(scale: float) -> str:
    return f"2^{np.log2(scale):g}"


def per_step(run, what):
    """(scales, finites, losses) of a run, float64, bool and float64 arrays of shape (STEPS,)."""
    return read_value(run["per_step"], what)


def params_of(run, what, part="params_f64"):
    """The returned params, checked to be a dict with the keys of params: as float64 arrays, or
    (part="params_dtypes") the names of their dtypes."""
    read_value(run["params"], what)
    return read_value(run[part])


@pytest.mark.points(2)
def test_training_matches_step_by_step_simulation(worker, training):
    """Scales, finite flags, losses, final parameters and DynScale equal the grader's simulation."""
    exp, run = training["expected"], training["runs"]["recover"]
    what = f"train_fp16_dynamic(..., ls0=DynScale({pow2(TOO_LARGE)}, 0), steps={STEPS}, tx=optax.adam({LR}))"
    scales, finites, losses = per_step(run, what)
    if finites.shape != (STEPS,) or list(finites) != exp["finites"]:
        k = next((i for i, (a, b) in enumerate(zip(finites, exp["finites"])) if a != b), min(len(finites), STEPS))
        fail(f"{what}: finite flags per step {finites.astype(int).tolist()[:k + 3]}..., expected "
             f"{np.array(exp['finites']).astype(int).tolist()[:k + 3]}... (first difference at step {k}). "
             "Hint: finite is all_finite of the unscaled gradients at the step's scale.")
    if scales.tolist() != exp["scales"]:
        k = next(i for i, (a, b) in enumerate(zip(scales, exp["scales"])) if a != b)
        fail(f"{what}: the scale used at step {k} is {scales[k]:g}, expected {exp['scales'][k]:g} "
             f"(the scales should be {[pow2(s) for s in exp['scales'][:k + 2]]}...). Hint: record ls.scale "
             "before the step and apply dyn_scale_step(ls, finite) with its defaults after it.")
    compare_with_simulation(training, flat(params_of(run, what)), "flat", f"{what}: final parameters", PARAM_RTOL)
    compare_with_simulation(training, losses, "losses", f"{what}: losses", LOSS_RTOL,
                            "Hint: record fp16_loss (unscaled) at the parameters the step starts from.")
    got_scale, got_good, _, _ = scale_state(read_value(run["ls"], what))
    if (got_scale, got_good) != (exp["scale"], exp["good"]):
        fail(f"{what}: final DynScale ({got_scale:g}, {got_good}), expected ({exp['scale']:g}, {exp['good']}).")
    require_one_scan(training)


SKIP_MISTAKES = (
    ("state_changes_on_skip", "That is changing the optimizer state on a skipped step (e.g. Adam's count and "
                              "moments advanced by an update with zeroed gradients). Hint: select the old "
                              "optimizer state as well as the old parameters when the step is not finite."),
    ("update_on_overflow", "That is updating on an overflow: the inf/NaN gradients reach the parameters. "
                           "Hint: when finite is False keep the parameters and the optimizer state as they were."),
)


def compare_with_simulation(training, got, key, what, rtol, hint=""):
    """assert_close against the simulation; the named mistakes are simulated only when it fails.
    No absolute floor: the losses are ~1e-5 (the loss weight), below numeric.ATOL."""
    expected = training["expected"][key]
    if is_close(got, expected, rtol, atol=0.0):
        return
    p, x, y, tx = training["p"], training["x"], training["y"], training["tx"]
    mistakes = [(simulate_training(p, x, y, TOO_LARGE, STEPS, tx, mistake)[key], message)
                for mistake, message in SKIP_MISTAKES]
    assert_close(got, expected, what, hint, rtol=rtol, atol=0.0, mistakes=mistakes)


@pytest.mark.points(2)
def test_skipped_steps_leave_params_and_adam_state_unchanged(worker, training):
    """Every step skipped: parameters bit for bit unchanged; skips first: Adam starts as if fresh."""
    what = f"train_fp16_dynamic from ls0=DynScale({pow2(HOPELESS)}, 0) (every one of the {STEPS} steps overflows)"
    run = training["runs"]["hopeless"]
    _, finites, _ = per_step(run, what)
    params = params_of(run, what)
    changed = [k for k in KEYS if not np.array_equal(params[k], np.asarray(training["p"][k]))]
    if finites.any() or changed:
        nan = any(not np.all(np.isfinite(params[k])) for k in changed)
        fail(f"{what}: " + (f"finite was True at steps {np.flatnonzero(finites).tolist()}; " if finites.any() else "")
             + (f"parameters {changed} changed although no step was finite. " if changed else "")
             + ("They are inf/NaN: that is updating on an overflow. " if nan else "")
             + "Hint: a skipped step keeps the old parameters and optimizer state exactly (jnp.where(finite, new, old)).")
    run = training["runs"]["recover"]
    what = f"train_fp16_dynamic from ls0=DynScale({pow2(TOO_LARGE)}, 0) (the first steps overflow)"
    compare_with_simulation(training, flat(params_of(run, what)), "flat", f"{what}: final parameters", PARAM_RTOL,
                            "Hint: on a skipped step keep params and optimizer state; on a finite one apply tx.update.")
    require_one_scan(training)


@pytest.mark.points(1)
def test_training_recovers_from_a_too_large_scale(worker, training, note):
    """From a scale far too large, the scale halves until the gradients are finite, then the loss falls."""
    what = f"train_fp16_dynamic from ls0=DynScale({pow2(TOO_LARGE)}, 0)"
    scales, finites, losses = per_step(training["runs"]["recover"], what)
    exp = training["expected"]
    first = int(np.argmax(exp["finites"]))
    assert 0 < first and exp["losses"][-1] < 0.5 * exp["losses"][first], "grader: the simulated run should recover"
    note(f"the grader's own run from scale {pow2(TOO_LARGE)}: {first} steps skipped, first finite at "
         f"{pow2(exp['scales'][first])}, loss {exp['losses'][first]:.3g} -> {exp['losses'][-1]:.3g} in {STEPS} steps.")
    if not finites.any():
        fail(f"{what}: no step was finite in {STEPS} steps (scales {fmt(scales)}). "
             + ("The scale is inf: that is holding the scale in fp16, where it overflows. " if not np.all(np.isfinite(scales)) else "")
             + "Hint: on an overflow divide the scale by the factor; it must come down to where fp16 does not overflow.")
    got_first = int(np.argmax(finites))
    if got_first != first:
        fail(f"{what}: the first finite step is {got_first}, expected {first} (the scale halves once per overflow).")
    if not losses[-1] < 0.5 * losses[first]:
        fail(f"{what}: the loss went from {losses[first]:.3g} (first finite step) to {losses[-1]:.3g}; it should "
             "at least halve. Hint: apply the optimizer's updates on finite steps.")
    require_one_scan(training)


@pytest.mark.points(4)
def test_train_is_one_scan_in_one_jit(worker, training):
    """The loop is one lax.scan of length steps inside jax.jit; the program does not grow with steps."""
    program = programs(training)[STEPS]
    if program["scans"] != 1:
        lengths = program["scan_lengths"]
        fail(f"expected one lax.scan of length steps={STEPS} in the traced train_fp16_dynamic, found "
             f"{'scans of lengths ' + str(lengths) if lengths else 'no scan'}. Hint: lax.scan(step, (params, "
             "tx.init(params), ls0), None, length=steps); a Python loop unrolls every step into the program.")
    sizes = {n: p["equations"] for n, p in programs(training).items()}
    if sizes[STEPS + 13] != sizes[STEPS]:
        fail(f"the traced program has {sizes[STEPS]} equations for steps={STEPS} but {sizes[STEPS + 13]} for "
             f"steps={STEPS + 13}: part of the loop is unrolled in Python. Hint: every step belongs in the scan body.")
    if not program["in_jit"]:
        fail("the scan is not inside jax.jit: train_fp16_dynamic should be one compiled program. "
             "Hint: decorate it with @partial(jax.jit, static_argnames=('steps', 'tx')).")


@pytest.mark.points(3)
def test_training_computes_in_fp16_inside_the_scan(worker, training):
    """Inside the scan every dot_general is float16 and overflows like fp16; params and scale stay float32."""
    live = read_value(programs(training)[STEPS]["live"])
    if live["scans"] != 1:
        fail(f"no single lax.scan of length steps={STEPS} whose result is used; the training steps must run in it.")
    dots_in, dots_all = live["dots_in_scan"], [tuple(d) for d in live["dots"]]
    not_f16 = sorted(set(dots_all) - {("float16", "float16")})
    if not_f16 or dots_in < 3 or dots_in != len(dots_all):
        fail(f"the training program has {len(dots_all)} matrix product(s) (@, jnp.dot), {dots_in} inside the scan"
             + (f", some on {not_f16} operands" if not_f16 else "") + ": expected the model's forward and backward "
             "passes inside the scan body, all in float16. Hint: each step differentiates fp16_loss * scale.")
    run = training["runs"]["recover"]
    _, finites, _ = per_step(run, "train_fp16_dynamic")
    if finites[:1].all():
        fail(f"the dots in the scan are float16, but the first step at scale {pow2(TOO_LARGE)} was finite, where fp16 "
             "overflows on this data: the parameters are updated from gradients computed some other way. "
             "Hint: each step's gradients are scaled_grads(p, x, y, ls.scale) of the fp16 model.")
    dtypes = params_of(run, "train_fp16_dynamic", "params_dtypes")
    scale_dtype = read_value(run["ls_scale_dtype"])
    if set(dtypes.values()) != {"float32"} or scale_dtype != "float32":
        fail(f"train_fp16_dynamic returned parameters of dtypes {dtypes} and a {scale_dtype} scale; both should stay "
             "float32: the master weights take updates too small for fp16"
             + (", and a scale held in fp16 overflows above 65504" if scale_dtype == "float16" else "") + ".")


@pytest.mark.points(3)
def test_skip_is_decided_inside_the_scan_from_the_steps_finite_flag(worker, training):
    """In the scan body, the new parameters and optimizer moments depend on that step's isfinite check."""
    live = read_value(programs(training)[STEPS]["live"])
    if live["scans"] != 1:
        fail(f"no single lax.scan of length steps={STEPS}: the skip must be decided inside the loop, step by step.")
    # Per carried output of the scan body: (shape, floating, depends on that step's is_finite).
    shapes = {tuple(v.shape) for v in training["p"].values()}
    carried = [(i, depends) for i, (shape, floating, depends) in enumerate(live["carry"])
               if tuple(shape) in shapes and floating]
    blind = [i for i, depends in carried if not depends]
    if not carried or blind:
        fail(f"in the scan body, {len(blind) if carried else 'all'} of the {len(carried)} carried parameter/moment "
             "arrays do not depend on that step's finite check (jnp.isfinite): the update is applied whatever the "
             "gradients are, i.e. updating on an overflow. Hint: p = jax.tree.map(lambda new, old: jnp.where(finite, "
             "new, old), p_new, p), and the same for the optimizer state.")
