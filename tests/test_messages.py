"""Messages that know what they depend on: a check that cannot judge a function because another of
the learner's functions fails says so and guesses no hint; "not attempted" names the function
that still raises; no ordinal is written by hand ("3th"); no name of a traced program's
primitives (`div`, `reduce_sum`) stands for what the learner wrote. In-process, no grading: the
corpora show the same through the grading command (tests/corpus/ex1/loss_raises_gradient_depends_on_it.py,
loss_left_as_stub.py, tests/corpus/ex2/grouped_loss_raises_measurements_depend_on_it.py)."""

import re
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from grading import ROOT
from graders.kit import jaxpr, verdicts
from graders.app import report
from graders.runner.grading import CheckResult, ExerciseResult
from graders.kit.numeric import ordinal

LEARNER = '''
import jax
import jax.numpy as jnp


def inner(x):
    {inner}


@jax.jit
def outer(x):
    return inner(x) * 2


def deepest(x):
    return outer(x) + 1
'''


def raised(tmp_path: Path, inner: str, call: str):
    """(exception, module) of calling `call` in a learner module whose `inner` has this body."""
    (tmp_path / "mod.py").write_text(textwrap.dedent(LEARNER.format(inner=inner)))
    module = verdicts.load_module("mod", tmp_path)
    with pytest.raises(BaseException) as info:
        getattr(module, call)(jnp.ones(3))
    return info.value, module


@pytest.mark.parametrize(("n", "text"), [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"), (12, "12th"),
                                         (13, "13th"), (21, "21st"), (22, "22nd"), (23, "23rd"), (50, "50th"),
                                         (101, "101st"), (111, "111th"), (112, "112th")])
def test_ordinals(n, text):
    assert ordinal(n) == text


def test_no_grader_writes_an_ordinal_by_hand():
    # f"{n}th" says "3th" and "1th": numeric.ordinal says it right.
    by_hand = [f"{path.relative_to(ROOT)}:{i}" for path in sorted((ROOT / "graders").rglob("*.py"))
               for i, line in enumerate(path.read_text().splitlines(), 1) if re.search(r"\}(st|nd|rd|th)\b", line)]
    assert not by_hand, by_hand


def test_not_attempted_names_the_function_that_still_raises(tmp_path):
    exc, module = raised(tmp_path, "raise NotImplementedError", "inner")
    outcome, message = verdicts.classify(exc, module, tmp_path, 10)
    assert outcome == "not_attempted"
    assert message.startswith("not attempted yet: `inner` still raises NotImplementedError (mod.py, line"), message


def test_a_function_that_calls_a_stub_names_the_stub(tmp_path):
    exc, module = raised(tmp_path, "raise NotImplementedError", "deepest")
    outcome, message = verdicts.classify(exc, module, tmp_path, 10)
    assert outcome == "not_attempted"
    assert "`deepest` calls `inner`, which still raises NotImplementedError" in message, message


def test_a_check_of_a_function_whose_callee_raises_says_it_depends_on_it_and_guesses_no_hint(tmp_path):
    exc, module = raised(tmp_path, "return jnp.sum(x, axis=4)", "deepest")
    outcome, message = verdicts.classify(exc, module, tmp_path, 10)
    assert outcome == "failed"
    assert message.startswith("depends on `inner`, which fails: `deepest` calls it (through `outer`), and it raised "
                              "ValueError"), message
    assert "(mod.py, line 7: return jnp.sum(x, axis=4))" in message, message
    assert "Hint" not in message


def test_the_function_that_raises_itself_gets_its_own_error(tmp_path):
    exc, module = raised(tmp_path, "return jnp.sum(x, axis=4)", "inner")
    assert verdicts.classify(exc, module, tmp_path, 10)[1].startswith("your code raised ValueError")


def test_a_helper_of_the_called_function_is_part_of_it(tmp_path):
    # A nested function (a scan body, a closure) raising is the called function's own error.
    (tmp_path / "mod.py").write_text("def f(x):\n    def body(y):\n        return y.nope\n    return body(x)\n")
    module = verdicts.load_module("mod", tmp_path)
    with pytest.raises(AttributeError) as info:
        module.f(1)
    assert verdicts.classify(info.value, module, tmp_path, 10)[1].startswith("your code raised AttributeError")


def test_report_names_the_stub_functions_of_an_exercise_not_attempted():
    checks = [CheckResult("a", 1, outcome="not_attempted", message="not attempted yet: `f` still raises NotImplementedError (m.py, line 3)"),
              CheckResult("b", 1, outcome="not_attempted", message="not attempted yet: `g` calls `f`, which still raises NotImplementedError"),
              CheckResult("c", 1, outcome="not_attempted", message="not attempted yet: `h` still raises NotImplementedError")]
    result = ExerciseResult("ex1", status="not attempted", checks=checks)
    text = report.body([result])
    assert "ex1_token_accumulation.py: `f` and `h` still raise NotImplementedError" in text, text
    assert "the stubs are unchanged" not in text


def test_said_never_shows_a_primitive_name_it_does_not_know():
    assert jaxpr.said("div") == "a division (/)"
    assert jaxpr.said("some_new_primitive") == "an operation"


def test_checkpoint_saves_in_the_learners_words():
    program = jax.make_jaxpr(jax.checkpoint(lambda w, x: jnp.sum(jnp.tanh(x @ w)),
                                            policy=jax.checkpoint_policies.dots_saveable))(jnp.ones((3, 3)), jnp.ones(3))
    (remat,) = [e for e in program.jaxpr.eqns if jaxpr.is_a(e, "checkpoint")]
    saved = jaxpr.checkpoint_saves(remat)
    assert saved == ["float32[3] output of a matrix product (@, jnp.dot, jnp.einsum)"], saved


# ---- how much of a batch a scan step reads, whatever spells the slice ------------------------

X = jnp.ones((8, 3))  # 4 micro-batches of 2 rows: one is 6 numbers


def step_reads(body) -> int:
    """Numbers of X one step of lax.scan(body) over the step numbers reads, X a constant."""
    program = jax.make_jaxpr(lambda x: lax.scan(lambda c, i: (c + body(x, i), None), 0.0, jnp.arange(4))[0])(X)
    (scan,) = [e for e in program.jaxpr.eqns if e.primitive.name == "scan"]
    consts, _, _ = jaxpr.scan_operands(scan)
    return sum(jaxpr.numbers_read(scan.params["jaxpr"], i) for i in consts)


@jax.custom_vjp
def _summed(a):
    return jnp.sum(a)


_summed.defvjp(lambda a: (jnp.sum(a), a.shape), lambda shape, g: (jnp.full(shape, g),))

ONE_MICRO_BATCH = {
    "traced index": lambda x, i: x.reshape(4, 2, 3)[i].sum(),
    "jnp.take": lambda x, i: jnp.take(x, 2 * i + jnp.arange(2), axis=0).sum(),
    "dynamic_slice": lambda x, i: lax.dynamic_slice_in_dim(x, 2 * i, 2).sum(),
    "inside jit": lambda x, i: jax.jit(lambda a, j: a.reshape(4, 2, 3)[j].sum())(x, i),
    "inside checkpoint": lambda x, i: jax.checkpoint(lambda a: jnp.take(a, 2 * i + jnp.arange(2), axis=0).sum())(x),
    "inside custom_vjp": lambda x, i: _summed(lax.dynamic_index_in_dim(x.reshape(4, 2, 3), i, keepdims=False)),
    "inside cond": lambda x, i: lax.cond(i > 0, lambda a: a[2 * i].sum() + a[2 * i + 1].sum(), lambda a: a[0:2].sum(), x),
    "row by row in a fori_loop": lambda x, i: lax.fori_loop(0, 2, lambda r, s: s + x[2 * i + r].sum(), 0.0),
}
WHOLE_BATCH = {
    "masking the rows": lambda x, i: jnp.sum(x * (jnp.arange(8) // 2 == i)[:, None]),
    "a sum of it all": lambda x, i: jnp.sum(x) * 0 + x[i].sum(),
    "rows in a while loop": lambda x, i: lax.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, c[1] + x[2 * i + c[0]].sum()),
                                                         (0, 0.0))[1],
}


@pytest.mark.parametrize("how", ONE_MICRO_BATCH)
def test_a_step_that_takes_its_micro_batch_reads_one_micro_batch(how):
    assert step_reads(ONE_MICRO_BATCH[how]) == 6


@pytest.mark.parametrize("how", WHOLE_BATCH)
def test_a_step_that_computes_with_the_whole_batch_reads_all_of_it(how):
    # a while loop's trip count is not known, so what it reads counts whole
    assert step_reads(WHOLE_BATCH[how]) == X.size
