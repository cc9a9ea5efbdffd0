"""The quiz grader accepts letters in any case and spacing, rejects other forms with a message,
and answers every question, right or wrong, with its explanation (never with a letter)."""

import pytest

from graders.exercises.quiz.checks import EXPLANATIONS, QUESTIONS

EX = "quiz"


def test_guessing_all_a_scores_only_the_questions_whose_answer_is_a(corpus):
    run = corpus(EX)["all_a"]
    assert run.exercise(EX)["score"] == 0
    assert all("is not right" in message for message in run.lost(EX).values())


def test_plausible_wrong_answers_lose_exactly_those_questions(corpus):
    lost = corpus(EX)["plausible_wrong"].lost(EX)
    assert set(lost) == {"question_2", "question_5", "question_10", "question_11", "question_12"}, lost
    assert 'expected one letter, "A" to "D"' in lost["question_10"]


@pytest.mark.parametrize("question", [2, 5, 11, 12])
def test_a_wrong_answer_carries_the_explanation(corpus, question):
    message = corpus(EX)["plausible_wrong"].lost(EX)[f"question_{question}"]
    assert message.endswith("is not right. " + EXPLANATIONS[question])


def test_every_right_answer_carries_its_explanation_in_the_report(reference_run):
    for question in QUESTIONS:
        assert f"is right. {EXPLANATIONS[question]}" in reference_run.report


def test_every_right_answer_carries_its_explanation_in_its_results_json_output(reference_run):
    for question in QUESTIONS:
        assert EXPLANATIONS[question] in reference_run.check(EX, f"question_{question}")["output"]


def test_a_lower_case_answer_with_spaces_is_read_as_its_letter(corpus):
    run = corpus(EX)["plausible_wrong"]
    assert run.check(EX, "question_1")["score"] == 1
