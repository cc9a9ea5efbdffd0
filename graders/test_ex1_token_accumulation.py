"""Grader for Exercise 1: token-weighted gradient accumulation.

Expected values come from a float64 NumPy version of the loss and its analytic gradient.
"""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from graders import jaxpr
from graders.learner import fail
from graders.numeric import as_scalar, assert_close, rng

# B, T, D all distinct, so a transposed or mis-reshaped axis cannot pass by accident.
B, T, D = 12, 7, 5


def make_batch(seed: int, lengths):
    """A padded batch whose row b holds lengths[b] valid tokens (0..T)."""
    r = rng(seed)
    lengths = np.asarray(lengths)
    x = r.normal(size=(len(lengths), T, D))
    y = r.normal(size=(len(lengths), T))
    m = (np.arange(T)[None, :] < lengths[:, None]).astype(np.float64)
    w = r.normal(size=(D,)) * 0.7
    return w, x, y, m


def as_f32(*arrays):
    return [jnp.asarray(a, jnp.float32) for a in arrays]


def loss_sum_np(w, x, y, m):
    return float(np.sum(m * (np.tanh(x @ w) - y) ** 2))


def grad_sum_np(w, x, y, m):
    """d/dw of sum_{b,t} m (tanh(x w) - y)^2, in float64."""
    t = np.tanh(x @ w)
    return np.einsum("bt,btd->d", m * 2.0 * (t - y) * (1.0 - t**2), x)


def expected_and_mistakes(w, x, y, m, n_micro):
    """The right gradient, and what each known wrong idea returns on the same batch."""
    g = grad_sum_np(w, x, y, m)
    n = m.sum()
    per_micro = []
    for xs, ys, ms in zip(*(np.split(a, n_micro) for a in (x, y, m))):
        with np.errstate(invalid="ignore", divide="ignore"):
            per_micro.append(grad_sum_np(w, xs, ys, ms) / ms.sum())
    everywhere = np.ones_like(m)
    mistakes = [
        (np.mean(per_micro, axis=0),
         "That is the plain average of the micro-batches' own per-token means: a micro-batch with "
         "few valid tokens gets as much weight as a full one (and one with none gives 0/0). "
         "Hint: accumulate loss sums and token counts across micro-batches; divide once at the end."),
        (g / n_micro,
         "That is the summed gradient divided by n_micro. Hint: divide by the total number of valid tokens."),
        (g / m.size,
         "That divides by every position (B*T), padding included. Hint: divide by the number of valid tokens, sum(m)."),
        (grad_sum_np(w, x, y, everywhere) / n,
         "Padded positions contribute to your loss. Hint: multiply the per-token loss by the mask m before summing."),
        (grad_sum_np(w, x, y, everywhere) / m.size,
         "That is the gradient of the mean over every position, padding included. Hint: mask the loss and divide by sum(m)."),
        (g, "That is the gradient of the summed loss, never divided. Hint: divide by the total number of valid tokens."),
    ]
    return g / n, mistakes


def check_gradient(sol, seed, lengths, n_micro, call=None):
    w, x, y, m = make_batch(seed, lengths)
    expected, mistakes = expected_and_mistakes(w, x, y, m, n_micro)
    call = call or partial(sol.accum_token_weighted, n_micro=n_micro)
    got = call(*as_f32(w, x, y, m))
    counts = m.reshape(n_micro, -1).sum(axis=1).astype(int).tolist()
    assert_close(got, expected, f"gradient with n_micro={n_micro} (valid tokens per micro-batch: {counts})",
                 mistakes=mistakes)


@pytest.mark.points(2)
def test_loss_sum_counts_only_valid_tokens(sol):
    """The first return value is the loss summed over valid tokens only."""
    w, x, y, m = make_batch(1, [7, 3, 0, 5, 1, 7, 2, 6, 4, 0, 7, 1])
    got = sol.tok_loss_sum_count(*as_f32(w, x, y, m))
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        fail(f"tok_loss_sum_count should return a pair (loss_sum, n_valid), got {type(got).__name__}.")
    s = as_scalar(got[0], "loss_sum")
    expected = loss_sum_np(w, x, y, m)
    assert_close(s, expected, "loss_sum", mistakes=[
        (loss_sum_np(w, x, y, np.ones_like(m)),
         "That sum includes the padded positions. Hint: multiply the per-token loss by m before summing."),
        (expected / m.sum(), "That is the per-token mean, not the sum. Hint: return the sum; dividing comes later."),
    ], hint="Hint: per token the loss is (tanh(x @ w) - y) ** 2.")


@pytest.mark.points(1)
def test_loss_sum_adds_up_over_batch_splits(sol):
    """Each part of a split batch gets its own loss sum, and the parts add up to the whole."""
    w, x, y, m = make_batch(2, [1, 7, 7, 7, 2, 7, 0, 3, 7, 7, 5, 7])
    whole = as_scalar(sol.tok_loss_sum_count(*as_f32(w, x, y, m))[0], "loss_sum of the whole batch")
    parts = []
    for s in (slice(0, 4), slice(4, B)):
        part = as_scalar(sol.tok_loss_sum_count(*as_f32(w, x[s], y[s], m[s]))[0], f"loss_sum of rows {s.start}:{s.stop}")
        expected = loss_sum_np(w, x[s], y[s], m[s])
        assert_close(part, expected, f"loss_sum of rows {s.start}:{s.stop}", mistakes=[
            (expected / m[s].sum(), "That is the part's per-token mean: means of parts do not add up to the "
                                    "whole, sums do. Hint: return a sum, not a mean.")])
        parts.append(part)
    assert_close(sum(parts), whole, "loss_sum(rows 0:4) + loss_sum(rows 4:12)",
                 "The parts should add up to the whole batch's value: return a sum, not a mean.")


@pytest.mark.points(1)
def test_count_is_number_of_valid_tokens(sol):
    """The second return value is the number of valid tokens, sum(m)."""
    lengths = [0, 4, 7, 2, 2, 6, 1, 0, 3, 7, 5, 1]
    w, x, y, m = make_batch(3, lengths)
    n = as_scalar(sol.tok_loss_sum_count(*as_f32(w, x, y, m))[1], "n_valid")
    assert_close(n, sum(lengths), "n_valid", mistakes=[
        (m.size, "That counts every position, padding included. Hint: count the valid tokens, sum(m).")])


@pytest.mark.points(3)
def test_gradient_matches_full_batch(sol):
    """Equals the full-batch gradient of the global per-token mean for n_micro = 1, 2, 3."""
    # Micro-batches hold very different numbers of valid tokens (none is empty here).
    lengths = [7, 7, 7, 7, 6, 7, 1, 1, 2, 1, 1, 1]
    for seed, n_micro in ((4, 1), (5, 2), (6, 3)):
        check_gradient(sol, seed, lengths, n_micro)


@pytest.mark.points(2)
def test_gradient_with_an_empty_micro_batch(sol):
    """Still right when a micro-batch holds no valid token at all (n_micro = 4 and n_micro = B)."""
    lengths = [7, 5, 6, 0, 0, 0, 1, 2, 1, 7, 0, 3]
    for seed, n_micro in ((7, 4), (8, B)):
        check_gradient(sol, seed, lengths, n_micro)


@pytest.mark.points(2)
def test_accumulates_with_lax_scan(sol):
    """A scan of length n_micro evaluates the loss, one micro-batch per step, and nothing outside it does."""
    w, x, y, m = as_f32(*make_batch(9, [3] * B))
    n_micro = 4
    program = jaxpr.trace(partial(sol.accum_token_weighted, n_micro=n_micro), w, x, y, m)
    scans = [e for e in jaxpr.find(program, "scan") if e.params["length"] == n_micro]
    if not scans:
        lengths = jaxpr.scan_lengths(program)
        fail(f"expected a lax.scan of length n_micro={n_micro} in the traced program; found "
             f"{'scans of length ' + str(lengths) if lengths else 'no scan'}. "
             "Hint: reshape the batch to (n_micro, B // n_micro, ...) and lax.scan over the first axis.")
    inside = sum(jaxpr.count_inside(e, "tanh") for e in scans)
    outside = jaxpr.count(program, "tanh") - inside
    if inside == 0 or outside > 0:
        fail(f"the scan of length {n_micro} is there, but the loss (its tanh) is computed "
             f"{'outside it' if inside == 0 else f'{outside} time(s) outside it as well'}: the scan does not do the accumulating. "
             "Hint: compute each micro-batch's gradient inside the scan body and carry the sums.")
    per_step = {e.outvars[0].aval.size for scan in scans for e in jaxpr.inside(scan) if e.primitive.name == "tanh"}
    micro_tokens = B * T // n_micro
    if per_step != {micro_tokens}:
        fail(f"each step of the scan evaluates the model on {sorted(per_step)} tokens, expected one micro-batch's "
             f"{micro_tokens} (B/n_micro = {B // n_micro} rows of T = {T}): the steps do not take the micro-batches "
             "in turn. Hint: reshape x, y and m to (n_micro, B // n_micro, ...) and pass them as the scan's xs.")


@pytest.mark.points(1)
def test_program_size_does_not_grow_with_n_micro(sol):
    """Tracing with a larger n_micro gives the same number of equations (a Python loop unrolls)."""
    w, x, y, m = as_f32(*make_batch(10, [4] * B))
    programs = {k: jaxpr.trace(partial(sol.accum_token_weighted, n_micro=k), w, x, y, m) for k in (2, 6)}
    sizes = {k: sum(1 for _ in jaxpr.walk(p)) for k, p in programs.items()}
    program = programs[2]
    if sizes[6] > sizes[2]:
        fail(f"the traced program has {sizes[2]} equations for n_micro=2 but {sizes[6]} for n_micro=6: "
             "the micro-batch loop is unrolled into the program. Hint: use lax.scan instead of a Python loop.")
    if jaxpr.count(program, "tanh") == 0:
        fail("the traced program never evaluates the model (no tanh in it), so it cannot be accumulating "
             "gradients. Hint: differentiate the micro-batch loss sum inside a lax.scan body.")


@pytest.mark.points(1)
def test_runs_under_jit(sol):
    """jax.jit of the function (n_micro fixed) gives the full-batch gradient too."""
    n_micro = 3
    jitted = jax.jit(partial(sol.accum_token_weighted, n_micro=n_micro))
    check_gradient(sol, 11, [1, 7, 2, 7, 3, 0, 7, 7, 4, 2, 6, 5], n_micro, call=jitted)
