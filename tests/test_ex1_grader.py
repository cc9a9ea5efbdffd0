"""Exercise 1's grader rejects each known wrong solution on the check meant to catch it."""

import pytest

from grading import corpus_cases

EX = "ex1"

# wrong solution in tests/corpus/ex1/ -> (check that must lose its points, words its message names)
CASES = {
    "mean_of_means": ("gradient_matches_full_batch", "plain average of the micro-batches' own per-token means"),
    "divide_by_n_micro": ("gradient_matches_full_batch", "divided by n_micro"),
    "divide_by_positions": ("gradient_matches_full_batch", "divides by every position"),
    "padding_in_loss": ("loss_sum_counts_only_valid_tokens", "includes the padded positions"),
    "loss_mean_not_sum": ("loss_sum_adds_up_over_batch_splits", "return a sum, not a mean"),
    "python_loop": ("program_size_does_not_grow_with_n_micro", "use lax.scan instead of a Python loop"),
    "scan_beside_full_grad": ("accumulates_with_lax_scan", "the scan does not do the accumulating"),
}


def test_every_wrong_solution_has_an_expectation():
    assert set(corpus_cases(EX)) == set(CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_wrong_solution_loses_points_on_intended_check(corpus, case):
    check, words = CASES[case]
    lost = corpus(EX)[case].lost(EX)
    assert check in lost, f"{case}: expected to lose '{check}', lost {sorted(lost)}"
    assert words in lost[check], f"{case}: message of '{check}' lacks {words!r}: {lost[check]!r}"


def test_empty_micro_batch_is_blamed_on_per_micro_batch_means(corpus):
    lost = corpus(EX)["mean_of_means"].lost(EX)
    assert "gradient_with_an_empty_micro_batch" in lost
    assert "one with none gives 0/0" in lost["gradient_with_an_empty_micro_batch"]


def test_padding_in_loss_also_breaks_the_gradient(corpus):
    lost = corpus(EX)["padding_in_loss"].lost(EX)
    assert "Padded positions contribute to your loss" in lost["gradient_matches_full_batch"]


def test_python_loop_keeps_the_numeric_points(corpus):
    # The numbers are right; only the technique checks may take points away.
    lost = corpus(EX)["python_loop"].lost(EX)
    assert set(lost) <= {"accumulates_with_lax_scan", "program_size_does_not_grow_with_n_micro"}
