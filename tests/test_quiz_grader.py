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


def _written(tmp_path, text):
    from types import SimpleNamespace

    from grading import grader_module

    path = tmp_path / "quiz.py"
    path.write_text(text)
    return grader_module(EX).written_answers(SimpleNamespace(__file__=str(path)))


@pytest.mark.parametrize("text", [
    'ANSWERS = {1: "D", 2: "B"}',
    'ANSWERS = {"1": "D", "2": "B"}',
    'LETTERS = "DB"\nANSWERS = {q: a for q, a in zip(range(1, 3), LETTERS)}',
    'ANSWERS = dict(enumerate("d b".upper().split(), start=1))',
    'ANSWERS = {1: None, 2: None}\nANSWERS[1] = "D"\nANSWERS.update({2: "B"})',
    'ANSWERS: dict = {f"{q}": a for q, a in [(1, "D"), (2, "B")]}',
])
def test_answers_built_from_the_files_own_literals_are_read_as_written(tmp_path, text):
    from grading import grader_module

    found = _written(tmp_path, text)
    question_number = grader_module(EX).question_number
    assert {question_number(k): v.strip().upper() for k, v in found.items()} == {1: "D", 2: "B"}


@pytest.mark.parametrize(("text", "words"), [
    ("import json\nANSWERS = json.load(open('key.json'))", "uses the name json"),
    ("ANSWERS = open('key.json').read()", "calls `open`"),
    ("ANSWERS = {q: 'A' for q in range(10**9)}", "is not a literal"),
    ("ANSWERS = {q: 'A' for q in range(1000000)}", "too long a range"),
    ("ANSWERS = {(q, r): 'A' for q in range(9000) for r in range(9000)}", "too many items"),
    ("ANSWERS = {1: 'A' for q in range(9000) for r in range(9000) if 0}", "too long to build"),
    ("ANSWERS = {1: ''.join(['D'])}", "calls .join()"),
    ("def pick(q):\n    return 'D'\nANSWERS = {q: pick(q) for q in range(1, 14)}", "calls `pick`"),
])
def test_answers_built_by_code_are_refused_saying_what_is_not_data(tmp_path, text, words):
    # The reader calls nothing of the learner's, and bounds its own work: a text that reads a file,
    # calls a function of its own or builds without end gets a message, not the key.
    from grading import grader_module

    found = _written(tmp_path, text)
    assert isinstance(found, grader_module(EX).NotData) and words in str(found), found


def test_question_numbers_may_be_ints_or_their_digits_and_nothing_else():
    from grading import grader_module

    question_number = grader_module(EX).question_number
    assert [question_number(k) for k in (1, "1", " 12 ", "Q3", "question 4")] == [1, 1, 12, 3, 4]
    assert [question_number(k) for k in (True, 1.0, "one", "1a", None)] == [None] * 5
