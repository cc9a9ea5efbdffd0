"""Exercise 1's wrong solutions, beyond the check each declares (tests/test_wrong_solutions.py):
what else they lose, and what they keep."""

import pytest

from grading import technique_free_params

EX = "ex1"
TECHNIQUE = {"accumulates_with_lax_scan", "nothing_outside_the_scan_touches_the_whole_batch"}


@pytest.mark.parametrize("case", technique_free_params(EX))
def test_technique_free_solutions_keep_the_numeric_points(corpus, case):
    # The numbers are right; only the technique checks take points away (at most half:
    # tests/test_wrong_solutions.py).
    lost = corpus(EX)[case].lost(EX)
    assert set(lost) == TECHNIQUE, (case, sorted(lost))


def test_wasted_full_batch_work_keeps_the_scan_points(corpus):
    # The scan does the work there; only the waste beside it is lost.
    lost = corpus(EX)["full_batch_work_times_zero"].lost(EX)
    assert set(lost) == {"nothing_outside_the_scan_touches_the_whole_batch"}, lost


def test_padding_in_loss_also_breaks_the_gradient(corpus):
    lost = corpus(EX)["padding_in_loss"].lost(EX)
    assert "Padded positions contribute to your loss" in lost["gradient_matches_full_batch"]


def test_running_mean_is_right_when_no_leading_micro_batch_is_empty(corpus):
    lost = corpus(EX)["running_mean"].lost(EX)
    assert set(lost) == {"gradient_with_empty_micro_batches"}, lost


def test_wrong_arithmetic_in_a_working_scan_keeps_the_technique_points(corpus):
    # The technique checks compare the program with itself, not with the right gradient.
    for case in ("divide_by_n_micro", "mean_of_means", "divide_by_positions"):
        lost = corpus(EX)[case].lost(EX)
        assert not TECHNIQUE & set(lost), (case, sorted(lost))
