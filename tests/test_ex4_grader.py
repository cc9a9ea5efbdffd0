"""Exercise 4's grader rejects each known wrong solution on the check meant to catch it."""

import pytest

from grading import corpus_cases

EX = "ex4"

CASES = {
    "closed_form_bf16": ("bf16_matches_step_by_step_rounding", "the steps were not each rounded"),
    "fp32_then_cast": ("chapter_case_values", "rounded to bf16 once at the end"),
    "hardcoded": ("bf16_matches_step_by_step_rounding", "round w - lr*grad to bf16 after every step"),
    "master_in_bf16": ("master_result_is_float32", "has dtype bfloat16, expected float32"),
    "threshold_whole_gap": ("rounding_threshold_matches_bf16_spacing", "That is the whole gap"),
    "threshold_ignores_w": ("rounding_threshold_matches_bf16_spacing", "the value for w = 1.0 every time"),
    "threshold_gap_above": ("rounding_threshold_matches_bf16_spacing", "half the gap *above* w"),
}


def test_every_wrong_solution_has_an_expectation():
    assert set(corpus_cases(EX)) == set(CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_wrong_solution_loses_points_on_intended_check(corpus, case):
    check, words = CASES[case]
    lost = corpus(EX)[case].lost(EX)
    assert check in lost, f"{case}: expected to lose '{check}', lost {sorted(lost)}"
    assert words in lost[check], f"{case}: message of '{check}' lacks {words!r}: {lost[check]!r}"


def test_master_in_bf16_is_named_in_the_simulation_check(corpus):
    lost = corpus(EX)["master_in_bf16"].lost(EX)
    assert "the master weight is being rounded to bf16" in lost["master_matches_float32_simulation"]
