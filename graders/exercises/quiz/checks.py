"""Grader for the quiz: one point per question, and every answer comes back with its explanation.

The key is not in this file: it sits beside it in key.json, as salted hashes. Hashing only
keeps a glance at graders/ from spoiling the quiz; with four letters per question anyone who tries
recovers every answer in at most four guesses per question (reference/quiz.py holds them in plain text
anyway). So the local key serves self-study. A course hides it: `make release` leaves
key.json out of the students' copy, and only the autograder holds it.

Without the key this grader checks only the form of ANSWERS (one letter, A to D, per question) and
says the answers are graded on submission (neither passed nor failed): every well-formed answer gets
the same result, so the students' copy cannot tell a right answer from a wrong one. Nor does it
hold the explanations: the release leaves EXPLANATIONS empty.

tests/test_quiz_key.py checks the hashes against reference/quiz.py and proves each answer, and
each fact the explanations state, on the installed JAX, Flax and Optax.
"""

import ast
import hashlib
import json
import re
from pathlib import Path

import pytest

from graders.kit.verdicts import Deferred, NotAttempted, fail

QUESTIONS = range(1, 16)
KEY_FILE = Path(__file__).resolve().parent / "key.json"

# The students' copy (no key): every well-formed answer reads this.
ANSWER_RECORDED = "answers recorded; graded when you submit (this copy of the package holds no answer key)"

# What the learner reads after answering, right or wrong: the fact behind the answer, never its letter.
# `make release` leaves them out of the students' copy (graders/course/bundle.py): they ship with the
# autograder only.
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
    14: "AdamW's decay is decoupled from the gradient: after the Adam step it subtracts lr * wd * theta_{t-1} "
        "from the weights, so every decayed weight shrinks by the same factor whatever its gradients. An L2 "
        "penalty puts wd * theta into the gradient instead, where it goes through the moments and is divided by "
        "sqrt(v_hat): a weight whose past gradients were large is decayed less, and the two optimizers follow "
        "different paths. Which leaves are decayed is the mask's business (optax.adamw decays every leaf "
        "unless given mask=...), and the decay is multiplied by the learning rate, so at a learning rate of 0 "
        "nothing decays (section 6.9).",
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


# ----- reading ANSWERS from quiz.py's text -----------------------------------------------------
# ANSWERS is read from the file's text, not from what running the module left behind, so a
# quiz.py that computes its answers (e.g. by trying letters against the key's hashes) gets nothing
# for it. The text may still build the dict from its own literals: a dict written out, dict(...),
# a comprehension over zip/range/enumerate of literal strings, names bound earlier in the file to
# such data, string methods such as .upper(). Nothing else is called, and the work is bounded, so
# the reading runs no learner code and cannot be made to hang.

# The builtins a text may call, and the string methods (on a str it built).
CALLABLE = {"dict": dict, "zip": zip, "range": range, "enumerate": enumerate, "list": list,
            "tuple": tuple, "str": str, "int": int, "len": len, "sorted": sorted, "reversed": reversed}
STR_METHODS = frozenset({"upper", "lower", "strip", "lstrip", "rstrip", "split", "casefold"})
# Bounds on what a text may build: the quiz needs fifteen entries.
MOST_STEPS = 100_000
MOST_ITEMS = 10_000


class NotData(Exception):
    """ANSWERS (or a name it uses) is not built from the file's own literals; says what is not."""


class Reader:
    """Evaluates an expression of literals, with the names bound so far (see CALLABLE)."""

    def __init__(self, names: dict):
        self.names, self.steps = names, 0

    def step(self, node):
        self.steps += 1
        if self.steps > MOST_STEPS:
            raise NotData("it takes too long to build")

    def sized(self, value):
        if isinstance(value, (str, list, tuple, dict, set, range)) and len(value) > MOST_ITEMS:
            raise NotData(f"it builds a value of {len(value):,} items")
        return value

    def value(self, node, scope: dict):
        self.step(node)
        if isinstance(node, ast.Constant):
            return self.sized(node.value)
        if isinstance(node, ast.Name):
            if node.id in scope:
                return scope[node.id]
            if node.id in self.names:
                found = self.names[node.id]
                if isinstance(found, NotData):
                    raise NotData(f"{node.id} is not data: {found}")
                return found
            if node.id in CALLABLE:
                return CALLABLE[node.id]
            raise NotData(f"it uses the name {node.id}, which the file does not bind to data")
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            items = [self.value(e, scope) for e in node.elts]
            return self.sized({ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items))
        if isinstance(node, ast.Dict):
            out = {}
            for k, v in zip(node.keys, node.values):
                if k is None:  # {**other}
                    out.update(self.mapping(self.value(v, scope)))
                else:
                    out[self.value(k, scope)] = self.value(v, scope)
            return self.sized(out)
        if isinstance(node, (ast.DictComp, ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            return self.comprehension(node, scope)
        if isinstance(node, ast.Call):
            return self.call(node, scope)
        if isinstance(node, ast.Subscript):
            target, index = self.value(node.value, scope), self.value(node.slice, scope)
            try:
                return target[index]
            except Exception as exc:
                raise NotData(f"indexing it raised {type(exc).__name__}") from None
        if isinstance(node, ast.Slice):
            parts = [None if p is None else self.value(p, scope) for p in (node.lower, node.upper, node.step)]
            return slice(*parts)
        if isinstance(node, ast.JoinedStr):
            return "".join(str(self.value(v.value, scope)) if isinstance(v, ast.FormattedValue) else str(v.value)
                           for v in node.values)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.value(node.left, scope), self.value(node.right, scope)
            if isinstance(left, (int, str, list, tuple)) and type(left) is type(right):
                return self.sized(left + right)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            operand = self.value(node.operand, scope)
            if isinstance(operand, int):
                return -operand
        raise NotData(f"`{ast.unparse(node)[:60]}` is not a literal")

    def mapping(self, value):
        if not isinstance(value, dict):
            raise NotData("** unpacks something other than a dict")
        return value

    def call(self, node, scope):
        func = node.func
        if isinstance(func, ast.Attribute):
            target = self.value(func.value, scope)
            if not (isinstance(target, str) and func.attr in STR_METHODS):
                raise NotData(f"it calls .{func.attr}(), which is not a string method it may use")
            function = getattr(target, func.attr)
        elif isinstance(func, ast.Name) and func.id in CALLABLE and func.id not in scope and func.id not in self.names:
            function = CALLABLE[func.id]
        else:
            raise NotData(f"it calls `{ast.unparse(func)[:60]}`, which is not data")
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                args.extend(self.items(self.value(a.value, scope)))
            else:
                args.append(self.value(a, scope))
        kwargs = {}
        for k in node.keywords:
            if k.arg is None:
                kwargs.update(self.mapping(self.value(k.value, scope)))
            else:
                kwargs[k.arg] = self.value(k.value, scope)
        if function is range and len(range(*args)) > MOST_ITEMS:
            raise NotData("it counts over too long a range")
        try:
            out = function(*args, **kwargs)
        except Exception as exc:
            raise NotData(f"`{ast.unparse(node)[:60]}` raised {type(exc).__name__}") from None
        if isinstance(out, (zip, enumerate, reversed)):  # over data of bounded size, made here
            out = list(out)
        return self.sized(out)

    def items(self, iterable) -> list:
        if isinstance(iterable, (str, list, tuple, dict, set, range)):
            return list(iterable)
        raise NotData("it iterates over something other than data")

    def comprehension(self, node, scope):
        results = []

        def loop(generators, scope):
            if not generators:
                if isinstance(node, ast.DictComp):
                    results.append((self.value(node.key, scope), self.value(node.value, scope)))
                else:
                    results.append(self.value(node.elt, scope))
                if len(results) > MOST_ITEMS:
                    raise NotData("it builds too many items")
                return
            first, rest = generators[0], generators[1:]
            for item in self.items(self.value(first.iter, scope)):
                self.step(first)
                inner = dict(scope)
                bind(first.target, item, inner)
                if all(self.value(test, inner) for test in first.ifs):
                    loop(rest, inner)

        loop(node.generators, scope)
        if isinstance(node, ast.DictComp):
            return dict(results)
        return set(results) if isinstance(node, ast.SetComp) else results


def bind(target, value, scope: dict) -> None:
    """Assign value to a comprehension's target (a name, or a tuple of names unpacked)."""
    if isinstance(target, ast.Name):
        scope[target.id] = value
        return
    if isinstance(target, (ast.Tuple, ast.List)):
        values = list(value) if isinstance(value, (tuple, list, str)) else None
        if values is None or len(values) != len(target.elts):
            raise NotData("a comprehension unpacks a value of another length")
        for t, v in zip(target.elts, values):
            bind(t, v, scope)
        return
    raise NotData(f"a comprehension assigns to `{ast.unparse(target)[:40]}`")


def written_answers(sol):
    """ANSWERS as quiz.py's text builds it from its own literals (the last top-level assignment),
    or a NotData saying why the text does not (None when the file cannot be read)."""
    try:
        tree = ast.parse(Path(sol.__file__).read_text())
    except (OSError, SyntaxError, TypeError, ValueError):
        return None
    names: dict = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        elif (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
              and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == "update"
              and isinstance(node.value.func.value, ast.Name)):  # ANSWERS.update({...})
            call, name = node.value, node.value.func.value.id
            into = names.get(name)
            if isinstance(into, dict):
                # dict(*args, **kwargs): what update would add, read as any dict(...) is
                added = evaluated(names, ast.Call(ast.Name("dict", ast.Load()), call.args, call.keywords))
                names[name] = added if isinstance(added, NotData) else {**into, **added}
            continue
        else:
            continue
        found = evaluated(names, value)
        for t in targets:
            if isinstance(t, ast.Name):
                names[t.id] = found
            elif isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):  # ANSWERS[3] = "B"
                into = names.get(t.value.id)
                key = evaluated(names, t.slice)
                if isinstance(into, dict) and not isinstance(found, NotData) and not isinstance(key, NotData):
                    names[t.value.id] = {**into, key: found}
                elif isinstance(into, dict):
                    names[t.value.id] = found if isinstance(found, NotData) else key
    return names.get("ANSWERS", NotData("the file has no top-level line `ANSWERS = {...}`"))


def evaluated(names: dict, node):
    """The value node builds from the names bound so far, or the NotData saying why it is not one."""
    try:
        return Reader(names).value(node, {})
    except NotData as exc:
        return exc
    except RecursionError:
        return NotData("it is nested too deeply")


def question_number(key) -> int | None:
    """The question a key of ANSWERS names: an int, or a string of its digits ("1", " 1 ",
    "Q1"); None for anything else."""
    if isinstance(key, int) and not isinstance(key, bool):
        return key
    if isinstance(key, str):
        found = re.fullmatch(r"\s*(?:q(?:uestion)?\s*)?(\d+)\s*", key, re.IGNORECASE)
        return int(found.group(1)) if found else None
    return None


WRITE_IT_OUT = "e.g. {1: \"B\", 2: \"D\", ...}"


def read_answer(sol, question: int) -> str:
    """The learner's letter for `question`, upper case; a stub's None reads "not attempted"."""
    answers = getattr(sol, "ANSWERS", None)
    if not isinstance(answers, dict):
        kind = type(answers).__name__
        fail(f"quiz.py should define ANSWERS as a dict {{question number: letter}}, {WRITE_IT_OUT}; got {kind}"
             + (f" of {len(answers)} items: key each letter by its question's number." if isinstance(answers, (list, tuple)) else "."))
    written = written_answers(sol)
    if isinstance(written, NotData):
        fail(f"ANSWERS must be written out in quiz.py as a plain dict of letters, {WRITE_IT_OUT} (or built from the "
             f"file's own literals, say by a comprehension over zip(range(1, 14), \"...\")), and left as written; "
             f"here {written}.")
    if written != answers:
        fail("ANSWERS must be written out in quiz.py as a plain dict of letters, " + WRITE_IT_OUT + ", and left as "
             "written: no code may compute or change it, and what your module holds differs from what its text says.")
    entries = [(key, value) for key, value in answers.items() if question_number(key) == question]
    if not entries:
        strays = [key for key in answers if question_number(key) is None]
        unread = f" These keys are not question numbers: {', '.join(map(repr, strays[:5]))}." if strays else ""
        fail(f"ANSWERS has no answer for question {question}.{unread} Hint: key each letter by its question's "
             f"number, {WRITE_IT_OUT} (\"{question}\" is read as {question} too).")
    if len({value.strip().upper() if isinstance(value, str) else repr(value) for _, value in entries}) > 1:
        shown = ", ".join(f"{key!r}: {value!r}" for key, value in entries)
        fail(f"ANSWERS answers question {question} more than once, differently ({shown}). Hint: keep one entry per question.")
    key, answer = entries[0]
    if answer is None:
        raise NotAttempted(f"ANSWERS[{key!r}] is still None")
    letter = answer.strip().upper() if isinstance(answer, str) else None
    if letter not in ("A", "B", "C", "D"):
        fail(f"ANSWERS[{key!r}] = {answer!r}: expected one letter, \"A\" to \"D\".")
    return letter


def grade_question(sol, explain, question: int) -> None:
    letter = read_answer(sol, question)
    key = load_key()
    if key is None:
        # The same words for every letter: this copy must not tell right from wrong, and counts
        # the answer neither way (make grade does not fail on a fully answered quiz).
        raise Deferred(ANSWER_RECORDED)
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
def test_question_14(sol, explain):
    """AdamW's decoupled decay against Adam with L2."""
    grade_question(sol, explain, 14)


@pytest.mark.points(1)
def test_question_15(sol, explain):
    """What a checkpoint must hold to resume exactly."""
    grade_question(sol, explain, 15)
