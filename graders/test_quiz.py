"""Grader for the quiz: one point per question, and every answer comes back with its explanation.

The key is not in this file: it sits beside it in quiz_key.json, as salted hashes. Hashing only
keeps a glance at graders/ from spoiling the quiz; with four letters per question anyone who tries
recovers every answer in at most four guesses per question (reference/quiz.py holds them in plain text
anyway). So the local key serves self-study. A course hides it: `make release` leaves
quiz_key.json out of the students' copy, and only the autograder holds it.

Without the key this grader checks only the form of ANSWERS (one letter, A to D, per question) and
says the answers are graded on submission: every well-formed answer gets the same result, so the
students' copy cannot tell a right answer from a wrong one.

tests/test_quiz_key.py checks the hashes against reference/quiz.py and proves each answer, and
each fact the explanations state, on the installed JAX, Flax and Optax.
"""

import ast
import hashlib
import json
from pathlib import Path

import pytest

from graders.learner import NotAttempted, fail

# Question 14 is section 6.9's (ex9's), written beside this one.
QUESTIONS = (*range(1, 14), 15)
KEY_FILE = Path(__file__).resolve().parent / "quiz_key.json"

# What the learner reads after answering, right or wrong: the fact behind the answer, never its letter.
EXPLANATIONS = {
    1: "Each parameter costs 4 bytes for its fp32 value, 4 for its gradient and 8 for Adam's two "
       "moments: 16 bytes, so 10^9 parameters need 16 GB before a single activation (section 6.1).",
    2: "Checkpointing saves memory only where it cuts the model into pieces. With one checkpoint around "
       "the whole model, the backward pass starts by recomputing the entire forward pass and holds all "
       "of its activations again, so the peak does not move. Per-layer checkpoints, smaller "
       "micro-batches and 2-byte activations each lower it (section 6.6).",
    3: "dots_saveable lets the backward pass keep the results of matrix multiplications (dot_general) "
       "and recompute the cheap elementwise work. Keeping everything is everything_saveable, keeping "
       "values tagged with checkpoint_name is save_only_these_names, and sending residuals to host "
       "memory is what the offload policies do (section 6.6).",
    4: "In Flax 0.12, nnx.Optimizer must be told which variables it updates, as the keyword "
       "argument wrt (e.g. wrt=nnx.Param); leaving it out raises TypeError. optimizer.update(model, "
       "grads) and nnx.state(model, nnx.BatchStat) are both fine (section 6.2).",
    5: "A cast is differentiated by casting back: the transpose of astype returns the cotangent in the "
       "parameter's own dtype, so the gradients of float32 parameters are float32. Only the activation "
       "gradients flowing through the backward pass are bfloat16 (section 6.7).",
    6: "W1 is split by columns, so each device computes its own slice of the hidden layer with no "
       "communication; W2 is split by rows, so each device ends with a partial sum of the output, and "
       "a single all-reduce adds them up (section 6.8).",
    7: "Under FSDP every device runs every layer, on its own slice of the batch: only the storage of "
       "parameters, gradients and optimizer state is split, and a layer's weights are all-gathered just "
       "before it runs. Giving each device some of the layers is pipeline parallelism (section 6.8).",
    8: "MultiSteps accumulates: for the first k-1 calls it returns all-zero updates and adds the "
       "gradient to a buffer in its state; on the k-th it runs Adam once on the mean of the k "
       "gradients, which is one large-batch step. Nothing needs scaling by hand, and the state changes "
       "on every call (section 6.5).",
    9: "jax.checkpoint is a transformation: it takes one function and returns a checkpointed function, "
       "which you then call. Passed the block and its input as extra positional arguments it raises "
       "TypeError (checkpoint() takes 1 positional argument); wrap first, call second, and for an NNX "
       "module use nnx.remat (a bug in an NNX rematerialization tutorial).",
    10: "save_only_these_names matches names attached with checkpoint_name (from jax.ad_checkpoint import checkpoint_name), not "
        "primitive names. Nothing in the block carries the name 'dot_general', so no error is raised "
        "and nothing inside the block is saved: it behaves like nothing_saveable (a bug in an NNX "
        "rematerialization tutorial).",
    11: "jax.remat (like jax.checkpoint) needs the function as its first argument, so calling it with "
        "only policy=... raises TypeError (missing 1 required positional argument: 'fun') as soon as "
        "the decorator line runs. Decorate with functools.partial(jax.remat, policy=policy), or call "
        "jax.remat(f, policy=policy) (a bug in an NNX rematerialization tutorial).",
    12: "Loss scaling is there to lift small gradients out of the underflow range, and the range of a "
        "format is set by its exponent bits. bfloat16 keeps float32's 8, so its smallest normal number "
        "is about 1.2e-38, the same as float32's; float16 has 5, so its smallest normal number is about "
        "6.1e-5, and a gradient of 1e-8 is exactly 0 in float16 but kept in bfloat16. Precision is not "
        "the reason (bfloat16 has 7 mantissa bits, float16 has 10), nor is accumulation: a matmul summed "
        "in float32 still underflows when its result is stored as float16, and the cotangents of a "
        "bfloat16 backward pass stay bfloat16 (section 6.7).",
    13: "With Explicit mesh axes the sharding of each array is part of its type, and JAX works it out "
        "while tracing. The second matmul contracts over the hidden dimension, which is split over "
        "'model', so each device only holds a partial sum, and JAX will not guess where the summed "
        "result should live: it raises ShardingTypeError (Contracting dimensions are sharded and it is "
        "ambiguous how the output should be sharded). Writing jnp.matmul(h, w2, out_sharding=P('data', "
        "None)) settles it, and the compiler then adds the partial sums with one all-reduce "
        "(section 6.8).",
    15: "A step after resuming reads every piece of state the step before it left behind, so the checkpoint "
        "must hold all of them. The parameters. BatchNorm's running mean and variance, which are state and "
        "not parameters (nnx.BatchStat: nnx.state(model, nnx.Param) leaves them out). The optimizer state "
        "with its step: Adam's moments, and the count the warmup schedule reads its position from; without "
        "them the schedule starts again at a learning rate of 0 and the moments at zero. And the RNG state, "
        "the dropout stream's key and count; without it dropout repeats the masks it drew before. Leave any "
        "one out and the resumed run parts from the one that never stopped (section 6.3).",
}


def load_key() -> dict | None:
    """{'salt': str, 'hashes': {question: hash}}, or None in a copy without the key."""
    try:
        data = json.loads(KEY_FILE.read_text())
    except FileNotFoundError:
        return None
    return {"salt": data["salt"], "hashes": {int(q): h for q, h in data["hashes"].items()}}


def digest(salt: str, question: int, letter: str) -> str:
    return hashlib.sha256(f"{salt}:{question}:{letter}".encode()).hexdigest()[:16]


def written_answers(sol) -> dict | None:
    """ANSWERS as written in quiz.py's text, or None when it is not a plain literal. Answers are
    read from the text, not from what running the module left behind, so a quiz.py that computes
    them (e.g. by trying letters against the key's hashes) gets nothing for it."""
    try:
        tree = ast.parse(Path(sol.__file__).read_text())
    except (OSError, SyntaxError, TypeError, ValueError):
        return None
    for node in tree.body:
        target = node.targets[-1] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == "ANSWERS" and node.value is not None:
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                return None
    return None


def read_answer(sol, question: int) -> str:
    """The learner's letter for `question`, upper case; a stub's None reads "not attempted"."""
    answers = getattr(sol, "ANSWERS", None)
    if not isinstance(answers, dict):
        fail(f"quiz.py should define ANSWERS as a dict {{question number: letter}}, got {type(answers).__name__}.")
    if written_answers(sol) != answers:
        fail("ANSWERS must be written out in quiz.py as a plain dict of letters, e.g. {1: \"B\", 2: \"D\", ...}, "
             "and left as written: no code may compute or change it.")
    answer = answers.get(question)
    if answer is None:
        raise NotAttempted(f"ANSWERS[{question}] is still None")
    letter = answer.strip().upper() if isinstance(answer, str) else None
    if letter not in ("A", "B", "C", "D"):
        fail(f"ANSWERS[{question}] = {answer!r}: expected one letter, \"A\" to \"D\".")
    return letter


def grade_question(sol, explain, question: int) -> None:
    letter = read_answer(sol, question)
    key = load_key()
    if key is None:
        # The same words for every letter: this copy must not tell right from wrong.
        fail("answered with one letter, as required; this copy of the package has no answer key, "
             "so the quiz is graded when you submit it.")
    explanation = EXPLANATIONS[question]
    if digest(key["salt"], question, letter) != key["hashes"][question]:
        fail(f"ANSWERS[{question}] = {letter!r} is not right. {explanation}")
    # A right answer carries its explanation too: a line in the report, kept with this check.
    explain(f"{letter!r} is right. {explanation}")


@pytest.mark.points(1)
def test_question_1(sol, explain):
    """Memory of fp32 parameters, gradients and Adam state."""
    grade_question(sol, explain, 1)


@pytest.mark.points(1)
def test_question_2(sol, explain):
    """What does not lower peak activation memory."""
    grade_question(sol, explain, 2)


@pytest.mark.points(1)
def test_question_3(sol, explain):
    """What dots_saveable keeps."""
    grade_question(sol, explain, 3)


@pytest.mark.points(1)
def test_question_4(sol, explain):
    """Which nnx.Optimizer line raises TypeError."""
    grade_question(sol, explain, 4)


@pytest.mark.points(1)
def test_question_5(sol, explain):
    """Gradient dtype under bf16 compute."""
    grade_question(sol, explain, 5)


@pytest.mark.points(1)
def test_question_6(sol, explain):
    """Communication of a Megatron MLP."""
    grade_question(sol, explain, 6)


@pytest.mark.points(1)
def test_question_7(sol, explain):
    """What FSDP is not."""
    grade_question(sol, explain, 7)


@pytest.mark.points(1)
def test_question_8(sol, explain):
    """What optax.MultiSteps does."""
    grade_question(sol, explain, 8)


@pytest.mark.points(1)
def test_question_9(sol, explain):
    """jax.checkpoint called with the block and its input."""
    grade_question(sol, explain, 9)


@pytest.mark.points(1)
def test_question_10(sol, explain):
    """save_only_these_names('dot_general') on an untagged block."""
    grade_question(sol, explain, 10)


@pytest.mark.points(1)
def test_question_11(sol, explain):
    """jax.remat(policy=...) used as a decorator."""
    grade_question(sol, explain, 11)


@pytest.mark.points(1)
def test_question_12(sol, explain):
    """Why bf16 needs no loss scaling and fp16 does."""
    grade_question(sol, explain, 12)


@pytest.mark.points(1)
def test_question_13(sol, explain):
    """A matmul over a sharded contracting dim on Explicit axes."""
    grade_question(sol, explain, 13)


@pytest.mark.points(1)
def test_question_15(sol, explain):
    """What a checkpoint must hold to resume exactly."""
    grade_question(sol, explain, 15)
