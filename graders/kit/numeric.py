"""Turning learner results into float64 arrays and comparing them with the grader's own
computation, with messages that say what was expected and what came back.

The graders' expected values are computed in NumPy float64 (or a plain single-device JAX
program); learner code runs in float32, so the tolerances below are float32's.
"""

import numpy as np

from graders.kit.verdicts import fail

# float32 against a float64 reference: each op rounds at ~6e-8 relative, and the reductions
# in these exercises add up to a few thousand terms, so 1e-4 relative leaves a wide margin
# while a wrong normalisation (off by 2x, or by a micro-batch's share) is off by far more.
RTOL = 1e-4
# Elements that should be near zero (e.g. gradients of saturated units) need an absolute floor.
ATOL = 1e-6
# A deep network can amplify float32's rounding beyond RTOL (ex2's residual layers do on some
# draws, XLA's float32 tanh more than NumPy's). Where the grader's own float32 JAX program for the
# same value is that far from float64, a learner's float32 program may be this many times further
# (it rounds the same ops in another order); a wrong formula is off by far more.
FLOAT32_SLACK = 4.0


def _kind(value) -> str:
    return type(value).__name__


def as_array(value, what: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """value as a float64 array, or a failed check that says what came back instead."""
    if value is None or isinstance(value, (str, bytes, dict, set)):
        fail(f"{what}: expected an array{_shape_text(shape)}, got {_kind(value)}. "
             "Hint: return the value itself, not a description of it.")
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        fail(f"{what}: expected an array{_shape_text(shape)}, got {_kind(value)} ({exc}).")
    if shape is not None and array.shape != tuple(shape):
        fail(f"{what}: expected shape {tuple(shape)}, got shape {array.shape}.")
    return array


def as_scalar(value, what: str) -> float:
    array = as_array(value, what)
    if array.size != 1:
        fail(f"{what}: expected a scalar, got an array of shape {array.shape}.")
    return float(array.reshape(()))


def as_int(value, what: str, hint: str = "", got: str | None = None) -> int:
    """value as a Python int (an int, a NumPy integer or a 0-d integer array), or a failed check
    that says what came back: a byte count in MiB or as a float is a different answer. `got`
    shows what came back when the value is not the learner's own object (a probe's type and
    repr of it, from the worker)."""
    array = np.asarray(value) if not isinstance(value, (bool, str, bytes, dict)) and value is not None else None
    if array is None or array.ndim != 0 or array.dtype.kind not in "iu":
        shown = got if got is not None else f"{type(value).__name__} {value!r}"
        fail(f"{what} should return an int, got {shown}. {hint}".rstrip())
    return int(array)


def _shape_text(shape) -> str:
    return "" if shape is None else f" of shape {tuple(shape)}"


def fmt(array) -> str:
    """A short human view of an array: the value for a scalar, else a few entries."""
    array = np.asarray(array, dtype=np.float64)
    if array.size == 1:
        return f"{float(array.reshape(())):.6g}"
    flat = array.reshape(-1)
    head = ", ".join(f"{v:.4g}" for v in flat[:4])
    return f"[{head}{', ...' if flat.size > 4 else ''}] (shape {array.shape})"


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st, 22nd, 101st, 111th: for a message."""
    n = int(n)
    suffix = "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def max_abs_diff(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)), initial=0.0))


def is_close(actual, expected, rtol: float = RTOL, atol: float = ATOL) -> bool:
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    if actual.shape != expected.shape or not np.all(np.isfinite(actual)):
        return False
    bound = atol + rtol * np.max(np.abs(expected), initial=0.0)
    return bool(np.max(np.abs(actual - expected), initial=0.0) <= bound)


def float32_rtol(expected, own_error: float) -> float:
    """RTOL, or wider where the grader's own float32 program for the expected value is further
    from it than that (own_error: its largest difference): FLOAT32_SLACK times as far."""
    scale = float(np.max(np.abs(np.asarray(expected, np.float64)), initial=0.0))
    return max(RTOL, FLOAT32_SLACK * own_error / scale) if scale else RTOL


def assert_close(actual, expected, what: str, hint: str = "", *, mistakes=(),
                 rtol: float = RTOL, atol: float = ATOL) -> np.ndarray:
    """Fail unless actual ≈ expected (tolerance relative to expected's largest entry).

    `mistakes` is a sequence of (value, message): if the learner's result matches the value a
    known wrong idea would give, the message names that idea instead of the generic hint.
    """
    expected = np.asarray(expected, np.float64)
    got = as_array(actual, what, expected.shape)
    if is_close(got, expected, rtol, atol):
        return got
    for wrong_value, message in mistakes:
        wrong = np.asarray(wrong_value, np.float64)
        if wrong.shape == got.shape and (
            is_close(got, wrong, rtol, atol) or (np.isnan(got).any() and np.isnan(wrong).any())
        ):
            fail(f"{what}: expected {fmt(expected)}, got {fmt(got)}. {message}")
    if not np.all(np.isfinite(got)):
        bad = int(np.sum(~np.isfinite(got)))
        fail(f"{what}: {bad} of {got.size} entries are NaN or infinite (expected {fmt(expected)}). "
             f"{hint or 'Hint: look for a division by zero or a log/sqrt of a negative number.'}")
    fail(f"{what}: expected {fmt(expected)}, got {fmt(got)} "
         f"(largest difference {max_abs_diff(got, expected):.2e}). {hint}".rstrip())


def rng(seed) -> np.random.Generator:
    """seed: an int, or ints such as [grading seed, k] (a draw of its own per check and per grading)."""
    return np.random.default_rng(seed)
