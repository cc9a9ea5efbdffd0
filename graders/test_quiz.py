"""Grader for the quiz: one point per question.

The key is stored as salted hashes, so reading this file does not give the answers away;
tests/test_quiz_key.py checks these hashes against reference/quiz.py and proves each answer
on the installed JAX, Flax and Optax.
"""

import hashlib

import pytest

from graders.learner import NotAttempted, fail

SALT = "jax-scale-quiz-2026"
KEY_HASHES = {
    1: "06c96028860dbd36",
    2: "f669e7b18f4fb967",
    3: "8048ba147c953dcf",
    4: "2fc8c65ffbf7b194",
    5: "5776c53564efe1b6",
    6: "037971ab2e378edd",
    7: "763ce12120616042",
    8: "b8a2f33db8f66c68",
    9: "06c512edb795f36e",
    10: "896bc1520bc2cbbb",
}

# The idea to revisit after a wrong answer (never the letter).
HINTS = {
    1: "Count the bytes per parameter: the parameter, its gradient and Adam's two moments, each fp32 (section 6.1).",
    2: "Think about what the backward pass must recompute when the only checkpoint is the whole model (section 6.6).",
    3: "The policy's name says which results it may save; the other policies are save_only_these_names and offload_* (6.6 Extra).",
    4: "Since Flax 0.11 one argument of nnx.Optimizer is required and keyword-only (6.2 Extra).",
    5: "What is the transpose of a dtype cast? The cotangent goes back to the parameter's own dtype (section 6.7).",
    6: "A column-split matmul needs no communication; a row-split one leaves partial sums (section 6.8).",
    7: "Compare FSDP with pipeline parallelism: which one splits the layers between devices (section 6.8)?",
    8: "MultiSteps accumulates for k-1 calls and then applies the wrapped optimizer once (section 6.5).",
    9: "jax.checkpoint is a transformation: it takes a function and gives back a function (seed 004's first bug).",
    10: "save_only_these_names matches names given with checkpoint_name, not primitive names (seed 004's second bug).",
}


def digest(question: int, letter: str) -> str:
    return hashlib.sha256(f"{SALT}:{question}:{letter}".encode()).hexdigest()[:16]


def grade_question(sol, question: int) -> None:
    answers = getattr(sol, "ANSWERS", None)
    if not isinstance(answers, dict):
        fail(f"quiz.py should define ANSWERS as a dict {{question number: letter}}, got {type(answers).__name__}.")
    answer = answers.get(question)
    if answer is None:
        raise NotAttempted(f"ANSWERS[{question}] is still None")
    letter = answer.strip().upper() if isinstance(answer, str) else None
    if letter not in ("A", "B", "C", "D"):
        fail(f"ANSWERS[{question}] = {answer!r}: expected one letter, \"A\" to \"D\".")
    if digest(question, letter) != KEY_HASHES[question]:
        fail(f"ANSWERS[{question}] = {letter!r} is not right. {HINTS[question]}")


@pytest.mark.points(1)
def test_question_1(sol):
    """Memory of fp32 parameters, gradients and Adam state."""
    grade_question(sol, 1)


@pytest.mark.points(1)
def test_question_2(sol):
    """What does not lower peak activation memory."""
    grade_question(sol, 2)


@pytest.mark.points(1)
def test_question_3(sol):
    """What dots_saveable keeps."""
    grade_question(sol, 3)


@pytest.mark.points(1)
def test_question_4(sol):
    """Which nnx.Optimizer line raises TypeError."""
    grade_question(sol, 4)


@pytest.mark.points(1)
def test_question_5(sol):
    """Gradient dtype under bf16 compute."""
    grade_question(sol, 5)


@pytest.mark.points(1)
def test_question_6(sol):
    """Communication of a Megatron MLP."""
    grade_question(sol, 6)


@pytest.mark.points(1)
def test_question_7(sol):
    """What FSDP is not."""
    grade_question(sol, 7)


@pytest.mark.points(1)
def test_question_8(sol):
    """What optax.MultiSteps does."""
    grade_question(sol, 8)


@pytest.mark.points(1)
def test_question_9(sol):
    """jax.checkpoint called with the block and its input."""
    grade_question(sol, 9)


@pytest.mark.points(1)
def test_question_10(sol):
    """save_only_these_names('dot_general') on an untagged block."""
    grade_question(sol, 10)
