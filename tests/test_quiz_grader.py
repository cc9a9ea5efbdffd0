"""The quiz grader accepts letters in any case and spacing, rejects other forms with a message,
and hints at the idea (never the letter) for a wrong answer."""

import pytest

EX = "quiz"


def test_guessing_all_a_scores_only_the_questions_whose_answer_is_a(corpus):
    run = corpus(EX)["all_a"]
    assert run.exercise(EX)["score"] == 0
    assert all("is not right" in message for message in run.lost(EX).values())


def test_plausible_wrong_answers_lose_exactly_those_questions(corpus):
    lost = corpus(EX)["plausible_wrong"].lost(EX)
    assert set(lost) == {"question_2", "question_5", "question_10"}
    assert "whole model" in lost["question_2"] and "transpose of a dtype cast" in lost["question_5"]
    assert 'expected one letter, "A" to "D"' in lost["question_10"]


@pytest.mark.parametrize("question", ["question_2", "question_5"])
def test_hint_does_not_give_the_letter_away(corpus, question):
    message = corpus(EX)["plausible_wrong"].lost(EX)[question]
    hint = message.split("is not right.", 1)[1]
    assert not any(f"'{letter}'" in hint or f'"{letter}"' in hint for letter in "ABCD")
