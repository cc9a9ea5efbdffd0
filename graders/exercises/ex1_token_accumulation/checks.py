"""Grader for Exercise 1: token-weighted gradient accumulation.

The checks never call the learner's code: graders/exercises/ex1_token_accumulation/probes.py does, on the
batches drawn here, and hands back plain numbers and summaries. Expected values come from a
float64 NumPy version of the loss and its analytic gradient. For the technique checks the probe
reads the learner's program with its jit calls inlined and its dead code removed
(graders.kit.jaxpr.flatten), follows the batch through it, and evaluates it once with the scan fed a
different batch than the rest of the program: only a scan that computes the result passes.
"""

import numpy as np
import pytest

from graders.kit import program
from graders.kit.expected import expected
from graders.kit.verdicts import fail
from graders.kit.numeric import as_scalar, assert_close, fmt, is_close, rng
from graders.exercises.ex1_token_accumulation.probes import DATA_NAMES, runs_with_keys_changed, scan_at_work as read_program

# B, T, D all distinct, so a transposed or mis-reshaped axis cannot pass by accident.
B, T, D = 12, 7, 5


def make_batch(seed, lengths):
    """A padded batch whose row b holds lengths[b] valid tokens (0..T); seed is [grading seed, k], so
    that the values differ from one grading to the next (the students' copy holds the public seed's)."""
    r = rng(seed)
    lengths = np.asarray(lengths)
    x = r.normal(size=(len(lengths), T, D))
    y = r.normal(size=(len(lengths), T))
    m = (np.arange(T)[None, :] < lengths[:, None]).astype(np.float64)
    w = r.normal(size=(D,)) * 0.7
    return w, x, y, m


@expected
def loss_sum_np(w, x, y, m):
    return float(np.sum(m * (np.tanh(x @ w) - y) ** 2))


@expected
def grad_sum_np(w, x, y, m):
    """d/dw of sum_{b,t} m (tanh(x w) - y)^2, in float64."""
    t = np.tanh(x @ w)
    return np.einsum("bt,btd->d", m * 2.0 * (t - y) * (1.0 - t**2), x)


@expected
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


RUNNING_MEAN = ("A running mean divides by the tokens seen so far, which is 0 while the first micro-batches are "
                "empty: 0/0. Hint: carry the gradient *sum* and the token count; divide once, after the scan.")


def check_gradient(worker, seed, lengths, n_micro, jit=False):
    w, x, y, m = make_batch(seed, lengths)
    expected, mistakes = expected_and_mistakes(w, x, y, m, n_micro)
    if m.reshape(n_micro, -1)[0].sum() == 0:
        mistakes = [(np.full_like(expected, np.nan), RUNNING_MEAN), *mistakes]
    counts = m.reshape(n_micro, -1).sum(axis=1).astype(int).tolist()
    what = f"gradient with n_micro={n_micro} (valid tokens per micro-batch: {counts})"
    got = worker.accum_token_weighted(w, x, y, m, n_micro, what, expected.shape, jit=jit)
    assert_close(got, expected, what, mistakes=mistakes)


@pytest.mark.points(1)
def test_loss_sum_counts_only_valid_tokens(worker, seed):
    """The first return value is the loss summed over valid tokens only."""
    w, x, y, m = make_batch([seed, 1], [7, 3, 0, 5, 1, 7, 2, 6, 4, 0, 7, 1])
    got = worker.tok_loss_sum_count(w, x, y, m, 0, "loss_sum", require_pair=True)
    if not got["pair"]:
        fail(f"tok_loss_sum_count should return a pair (loss_sum, n_valid), got {got['type']}.")
    s = as_scalar(got["value"], "loss_sum")
    expected = loss_sum_np(w, x, y, m)
    assert_close(s, expected, "loss_sum", mistakes=[
        (loss_sum_np(w, x, y, np.ones_like(m)),
         "That sum includes the padded positions. Hint: multiply the per-token loss by m before summing."),
        (expected / m.sum(), "That is the per-token mean, not the sum. Hint: return the sum; dividing comes later."),
    ], hint="Hint: per token the loss is (tanh(x @ w) - y) ** 2.")


@pytest.mark.points(1)
def test_loss_sum_adds_up_over_batch_splits(worker, seed):
    """Each part of a split batch gets its own loss sum, and the parts add up to the whole."""
    w, x, y, m = make_batch([seed, 2], [1, 7, 7, 7, 2, 7, 0, 3, 7, 7, 5, 7])
    what = "loss_sum of the whole batch"
    whole = as_scalar(worker.tok_loss_sum_count(w, x, y, m, 0, what)["value"], what)
    parts = []
    for s in (slice(0, 4), slice(4, B)):
        what = f"loss_sum of rows {s.start}:{s.stop}"
        part = as_scalar(worker.tok_loss_sum_count(w, x[s], y[s], m[s], 0, what)["value"], what)
        expected = loss_sum_np(w, x[s], y[s], m[s])
        assert_close(part, expected, f"loss_sum of rows {s.start}:{s.stop}", mistakes=[
            (expected / m[s].sum(), "That is the part's per-token mean: means of parts do not add up to the "
                                    "whole, sums do. Hint: return a sum, not a mean.")])
        parts.append(part)
    assert_close(sum(parts), whole, "loss_sum(rows 0:4) + loss_sum(rows 4:12)",
                 "The parts should add up to the whole batch's value: return a sum, not a mean.")


@pytest.mark.points(1)
def test_count_is_number_of_valid_tokens(worker, seed):
    """The second return value is the number of valid tokens, sum(m)."""
    lengths = [0, 4, 7, 2, 2, 6, 1, 0, 3, 7, 5, 1]
    w, x, y, m = make_batch([seed, 3], lengths)
    n = as_scalar(worker.tok_loss_sum_count(w, x, y, m, 1, "n_valid")["value"], "n_valid")
    assert_close(n, sum(lengths), "n_valid", mistakes=[
        (m.size, "That counts every position, padding included. Hint: count the valid tokens, sum(m).")])


@pytest.mark.points(2)
def test_gradient_matches_full_batch(worker, seed):
    """Equals the full-batch gradient of the global per-token mean for n_micro = 1, 2, 3."""
    # Micro-batches hold very different numbers of valid tokens (none is empty here).
    lengths = [7, 7, 7, 7, 6, 7, 1, 1, 2, 1, 1, 1]
    for k, n_micro in ((4, 1), (5, 2), (6, 3)):
        check_gradient(worker, [seed, k], lengths, n_micro)


@pytest.mark.points(2)
def test_gradient_with_empty_micro_batches(worker, seed):
    """Still right when micro-batches hold no valid token: in the middle, last, first, and for n_micro = B."""
    # Layouts with the first micro-batch empty come after the others, so that a running mean
    # (0/0 only when the first micro-batches are empty) is named as such.
    for k, n_micro, lengths in ((7, 4, [3, 7, 1, 0, 0, 0, 6, 2, 7, 0, 0, 0]),   # middle and last
                                (8, 4, [0, 0, 0, 7, 5, 6, 0, 0, 0, 2, 1, 0]),   # first and middle
                                (12, 6, [0, 0, 0, 0, 4, 7, 0, 0, 1, 0, 0, 0]),  # first three of six
                                (13, B, [0, 7, 5, 0, 6, 0, 1, 2, 0, 7, 3, 0])):  # single rows, first to last
        check_gradient(worker, [seed, k], lengths, n_micro)


@pytest.mark.points(1)
def test_runs_under_jit(worker, seed):
    """jax.jit of the function (n_micro fixed) gives the full-batch gradient too."""
    check_gradient(worker, [seed, 11], [1, 7, 2, 7, 3, 0, 7, 7, 4, 2, 6, 5], 3, jit=True)


# ---- technique: the scan does the work -------------------------------------------------------

# The program is read at its own sizes: T much larger than D and n_micro, so that one micro-batch
# of y (ROWS * T_ = 38 numbers) is more than the n_micro gradients a scan that stacks them hands
# back (N_MICRO * D_ = 20), and those are more than an accumulating scan needs to hand back (a
# gradient and a few sums: D_ + a handful).
N_MICRO, ROWS, T_, D_ = 4, 2, 19, 5
B_ = N_MICRO * ROWS


def technique_batch(seed, lengths):
    r = rng(seed)
    lengths = np.asarray(lengths)
    x = r.normal(size=(B_, T_, D_))
    y = r.normal(size=(B_, T_))
    m = (np.arange(T_)[None, :] < lengths[:, None]).astype(np.float64)
    return x, y, m


def same_numbers(got, value) -> bool:
    """is_close, where a known mistake that is not a number (0/0) is matched by one that is not either."""
    got, value = np.asarray(got, np.float64), np.asarray(value, np.float64)
    if got.shape != value.shape:
        return False
    finite = np.isfinite(value)
    if finite.all():
        return is_close(got, value)
    return bool(np.array_equal(np.isfinite(got), finite) and is_close(got[finite], value[finite]))


def held_to_the_gradient(summary, worlds) -> None:
    """The program read is the one that computes the learner's gradient: run by the grader on both
    batches, it returns the gradient (or a known mistake in it, which the gradient checks name),
    else the technique is not judged on it (a program that reads like the technique but computes
    something else earns nothing)."""
    for name, world in zip(("on_a", "on_b"), worlds):
        expected, mistakes = expected_and_mistakes(*world, N_MICRO)
        got = np.asarray(summary[name], np.float64)
        if is_close(got, expected) or any(same_numbers(got, value) for value, _ in mistakes):
            continue
        fail(f"run by the grader on its own batch, the program of accum_token_weighted returns {fmt(got)}, where "
             f"the token-weighted gradient is {fmt(expected)}: the technique is judged on the program that computes "
             "your gradient. Hint: make the gradient right first (the checks above say how).")


def same_for_other_draws(closed, worlds, summary) -> None:
    """A program that draws random numbers (a key it makes or holds) returns the same gradient with
    every key changed: with its own key a dropout left on may drop none of the grader's tokens,
    with others it does (a keep-everything mask, a scale of 1.0, a permutation undone pass)."""
    try:
        runs = runs_with_keys_changed(closed, worlds)
    except program.ProgramError as exc:
        fail(f"the program of accum_token_weighted draws random numbers, and the grader could not run it with "
             f"other keys to see whether its result depends on them: {exc}.")
    for changed in runs:
        for name, got in zip(("on_a", "on_b"), changed):
            own = np.asarray(summary[name], np.float64)
            if not is_close(got, own):
                fail(f"run by the grader with other data in every PRNG key your program makes (the seed of "
                     f"jax.random.key or PRNGKey, the data of a key it holds), the program of accum_token_weighted "
                     f"returns {fmt(got)}, where with its own keys it returns {fmt(own)}: the result depends on the "
                     "random draws (dropout or noise left on), so it is the token-weighted gradient for some draws "
                     "only. Hint: draw nothing that changes the gradient (a mask of keep probability 1.0 is fine).")


@pytest.fixture(scope="module")
def scan_at_work(worker, seed):
    """The scans that compute the learner's gradient, and what touches the batch outside them;
    fails (for every technique check) when no scan of length n_micro does the work. The program is
    the learner's, sent as data and read and run here (graders/kit/program.py)."""
    w = rng([seed, 20]).normal(size=(D_,)) * 0.7
    x, y, m = technique_batch([seed, 21], [19, 3, 0, 0, 11, 19, 1, 7])
    xb, yb, mb = technique_batch([seed, 22], [2, 19, 19, 5, 0, 9, 13, 1])
    sent = worker.traced_program([w, x, y, m], N_MICRO)
    try:
        closed = program.decode(sent).closed
    except program.ProgramError as exc:
        fail(f"the program of accum_token_weighted could not be read: {exc}.")
    summary = read_program(closed, [w, x, y, m], [w, xb, yb, mb], N_MICRO)
    if "inputs" in summary:
        fail(f"the program sent for accum_token_weighted takes inputs of shapes {summary['inputs']}, not the "
             "grader's (w, x, y, m).")
    shapes = summary["shapes"]
    if shapes != [(D_,)]:
        fail(f"accum_token_weighted should return one array of shape (D,) = ({D_},), got {len(shapes)} value(s) of "
             f"shape(s) {shapes}. Hint: return the averaged gradient only.")
    per_step, outside = summary["per_step"], summary["outside"]
    hint = "Hint: reshape x, y and m to (n_micro, B // n_micro, ...) and pass them to lax.scan as xs."
    if not summary["scans"]:
        lengths, live = summary["scan_lengths"], summary["live_lengths"]
        if summary["while_loops"] and N_MICRO not in live:
            found = ("a lax.while_loop (or a fori_loop with traced bounds, which JAX runs as one) and no scan of that "
                     "length: the exercise asks for lax.scan (lax.fori_loop with Python-int bounds runs as one)")
        elif not lengths:
            found = ("no lax.scan at all (a Python loop over the micro-batches is no scan: tracing unrolls the loop "
                     "into n_micro copies of its body)")
        elif N_MICRO not in live and N_MICRO in lengths:
            found = (f"a scan of length {N_MICRO}, but its result never reaches the returned value: it is dead code "
                     "(removed before anything is counted)")
        elif N_MICRO not in live:
            found = f"scans of length {sorted(set(lengths))} only"
        else:
            found = (f"a scan of length {N_MICRO} that never receives the batch (the micro-batches are not its xs, "
                     f"and the batch is used outside it: {', '.join(outside[:3])})")
        fail(f"expected a lax.scan of length n_micro={N_MICRO} that takes the batch one micro-batch per step; "
             f"found {found}. {hint}")
    on_a, on_b, fed_b = (np.asarray(summary[k], np.float64) for k in ("on_a", "on_b", "fed_b"))
    if is_close(on_a, on_b):
        fail(f"the result is the same for two different batches ({fmt(on_a)}): it does not depend on the data, so "
             "the scan computes nothing that reaches it. Hint: compute each micro-batch's gradient in the scan body.")
    if not is_close(fed_b, on_b):
        decoy = is_close(fed_b, on_a)
        fail("fed another batch to the scan (and only to the scan), the result should have become your result on that "
             f"batch, {fmt(on_b)}; it was {fmt(fed_b)}"
             + (", your result on the batch the rest of the program sees: a decoy. The scan runs beside a "
                "computation outside it that makes the answer, and its own result is dropped (multiplied by 0, "
                "discarded, or selected away)." if decoy else
                ": part of the result is computed outside the scan, from the whole batch.")
             + (f" Outside the scan: {', '.join(outside[:3])}." if outside else "")
             + " Hint: compute each micro-batch's gradient and token count in the scan body; after the scan, "
               "only divide.")
    held_to_the_gradient(summary, [(w, x, y, m), (w, xb, yb, mb)])
    same_for_other_draws(closed, [(w, x, y, m), (w, xb, yb, mb)], summary)
    micro = [size // N_MICRO for size in (B_ * T_ * D_, B_ * T_, B_ * T_)]
    if per_step != micro:
        seen = ", ".join(f"{n} numbers of {name} (one micro-batch is {k})"
                         for name, n, k in zip(DATA_NAMES, per_step, micro))
        whole = summary["whole"]
        fail(f"each step of the scan should read one micro-batch of x, y and m; it reads {seen}"
             f"{' (' + '; '.join(whole) + ')' if whole else ''}. {hint}")
    handed_back = summary["handed_back"]
    if not 0 <= handed_back < ROWS * T_:  # a NaN or a negative count is no scan's
        fail(f"the scan hands back {handed_back} numbers, as many as the micro-batches themselves (one micro-batch "
             f"of y is {ROWS * T_}): the batch is passed through the scan and the gradient computed after it. "
             "Hint: compute each micro-batch's gradient in the scan body and carry only the sums.")
    return {"outside": outside, "handed_back": handed_back}


@pytest.mark.points(5)
def test_accumulates_with_lax_scan(scan_at_work):
    """A live scan of length n_micro reads one micro-batch per step and computes the result: fed another batch, the result becomes that batch's gradient; it carries sums, not every micro-batch's gradient."""
    # The fixture checks the scan; here, what it hands back: the result may be computed from a
    # running sum (D numbers and a few counts), not from n_micro gradients stacked by the scan
    # (lax.map, the scan's ys, or a buffer carried and filled) and added up after it.
    handed_back = scan_at_work["handed_back"]
    if handed_back >= N_MICRO * D_:
        fail(f"the scan hands back {handed_back} numbers, as many as its {N_MICRO} micro-batch gradients of "
             f"D={D_} numbers each, and the result is added up from them after it: the gradients are stacked "
             "(lax.map, the scan's ys, or a buffer filled step by step), not accumulated, so their memory grows "
             "with n_micro. Hint: carry the running gradient sum in the scan's carry and add each micro-batch's "
             "gradient to it in the body; return nothing per step (ys None).")


@pytest.mark.points(3)
def test_nothing_outside_the_scan_touches_the_whole_batch(scan_at_work):
    """Outside the scan the batch is only reshaped into micro-batches: no arithmetic on it, not even discarded."""
    outside = scan_at_work["outside"]
    if outside:
        fail(f"outside the scan, the program still computes with the whole batch: {', '.join(outside[:4])}. "
             "That is full-batch work (and memory) the accumulation exists to avoid, even when its result is "
             "multiplied by 0. Hint: count the tokens in the scan body too, and leave only reshapes outside it.")
