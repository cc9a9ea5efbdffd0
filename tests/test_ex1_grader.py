"""Exercise 1's wrong solutions, beyond the check each declares (tests/test_wrong_solutions.py):
what else they lose, and what they keep."""

from grading import corpus_cases
from graders import catalog
from graders.spec import read_checks

EX = "ex1"
TECHNIQUE = {"accumulates_with_lax_scan", "nothing_outside_the_scan_touches_the_whole_batch"}
# Right numbers, no working scan: a Python loop, decoys beside a full-batch gradient, a scan over the
# whole batch, a scan that only adds or only passes the batch through.
NO_TECHNIQUE = ("python_loop", "decoy_scan_beside_full_grad", "decoy_selected_away", "decoy_stop_gradient",
                "scan_result_discarded", "scan_over_full_batch", "scan_once_over_full_batch",
                "vmap_outside_scan", "pass_batch_through_scan")


def score(run) -> float:
    return sum(t["score"] for t in run.results["tests"] if t["tags"] == [EX])


def test_technique_free_solutions_score_at_most_half(corpus):
    total = sum(c.points for c in read_checks(catalog.grader_file(EX)))
    for case in NO_TECHNIQUE:
        run = corpus(EX)[case]
        assert score(run) <= total / 2, (case, score(run), total)


def test_technique_free_solutions_keep_the_numeric_points(corpus):
    # The numbers are right; only the technique checks take points away.
    for case in NO_TECHNIQUE:
        lost = corpus(EX)[case].lost(EX)
        assert set(lost) == TECHNIQUE, (case, sorted(lost))


def test_no_technique_list_names_real_corpus_files():
    assert set(NO_TECHNIQUE) <= set(corpus_cases(EX))


def test_wasted_full_batch_work_keeps_the_scan_points(corpus):
    # The scan does the work there; only the waste beside it is lost.
    assert set(corpus(EX)["full_batch_work_times_zero"].lost(EX)) == {"nothing_outside_the_scan_touches_the_whole_batch"}


def test_padding_in_loss_also_breaks_the_gradient(corpus):
    lost = corpus(EX)["padding_in_loss"].lost(EX)
    assert "Padded positions contribute to your loss" in lost["gradient_matches_full_batch"]


def test_running_mean_is_right_when_no_leading_micro_batch_is_empty(corpus):
    assert set(corpus(EX)["running_mean"].lost(EX)) == {"gradient_with_empty_micro_batches"}


def test_wrong_arithmetic_in_a_working_scan_keeps_the_technique_points(corpus):
    # The technique checks compare the program with itself, not with the right gradient.
    for case in ("divide_by_n_micro", "mean_of_means", "divide_by_positions"):
        lost = corpus(EX)[case].lost(EX)
        assert not TECHNIQUE & set(lost), (case, sorted(lost))
