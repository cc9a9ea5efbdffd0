"""The `@expected` mark (graders/kit/expected.py) and what the release does with it
(graders/course/bundle.py): the full package runs a marked function as written; recording writes
each call as data; the students' copy answers a recorded call, defers any other, and keeps every
line but the marked bodies. Fast: no grading (tests/test_course_release.py makes a real copy)."""

import ast
import os
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from grading import ROOT
from graders import catalog, settings
from graders.course.bundle import drop_unused, strip_expected, without_bench_edits, without_explanations
from graders.kit import expected as marks
from graders.kit.verdicts import Deferred, classify

MODULE = textwrap.dedent('''
    import numpy as np

    from graders.kit.expected import expected

    SCALE = 2.0  # a constant the checks keep


    def _helper(x):
        # only the marked body uses this
        return np.tanh(x) * SCALE


    @expected
    def own_value(x, k=3):
        """The grader's own value."""
        y = _helper(x)  # the solution, in the grader's words
        return {"sum": float(np.sum(y)) * k, "counts": {1, 2}}


    def test_check(worker):
        return own_value(np.arange(4.0))
''')


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"marked_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_full_package_runs_a_marked_function_as_written(tmp_path, monkeypatch):
    monkeypatch.delenv(settings.RECORD_EXPECTED, raising=False)
    (tmp_path / "checks.py").write_text(MODULE)
    module = load(tmp_path / "checks.py")
    assert module.own_value.__code__.co_filename == str(tmp_path / "checks.py")  # not wrapped at all
    assert module.own_value(np.arange(4.0))["sum"] == pytest.approx(3 * 2 * np.tanh(np.arange(4.0)).sum())


def test_recorded_calls_answer_the_students_copy_and_others_are_deferred(tmp_path, monkeypatch):
    folder = tmp_path / "ex_demo"
    folder.mkdir()
    (folder / "checks.py").write_text(MODULE)
    monkeypatch.setenv(settings.RECORD_EXPECTED, str(tmp_path / "calls"))
    full = load(folder / "checks.py")
    want = full.own_value(np.arange(4.0))
    full.own_value(np.arange(4.0), k=3)  # the same call, spelled otherwise: one record
    monkeypatch.delenv(settings.RECORD_EXPECTED)
    recorded = marks.collect(tmp_path / "calls")
    assert list(recorded) == ["ex_demo"]

    copy = tmp_path / "copy" / "ex_demo"
    copy.mkdir(parents=True)
    text, names = strip_expected(MODULE, "checks.py")
    texts = drop_unused({copy / "checks.py": text})
    (copy / "checks.py").write_text(texts[copy / "checks.py"])
    (copy / marks.PUBLIC_FILE).write_bytes(recorded["ex_demo"])
    student = load(copy / "checks.py")
    assert names == ["own_value"]
    assert student.own_value(np.arange(4.0)) == want  # the set comes back a set
    assert student.own_value(x=np.arange(4.0), k=3) == want
    with pytest.raises(Deferred) as raised:
        student.own_value(np.arange(5.0))
    assert classify(raised.value, None, tmp_path, 1.0) == ("deferred", str(raised.value))
    assert "graded when you submit" in str(raised.value)
    assert marks.or_else(lambda: student.own_value(np.arange(5.0)), "unnamed") == "unnamed"


def test_work_only_a_wrong_answer_asks_for_is_done_ahead_only_when_recording(monkeypatch):
    done = []
    monkeypatch.delenv(settings.RECORD_EXPECTED, raising=False)
    marks.recorded_ahead(lambda: done.append("full package"))
    monkeypatch.setenv(settings.RECORD_EXPECTED, "/nonexistent")
    marks.recorded_ahead(lambda: done.append("recording"))
    assert done == ["recording"]


def test_the_copy_keeps_every_line_but_the_marked_bodies_and_what_only_they_used():
    text, _ = strip_expected(MODULE, "checks.py")
    stripped = drop_unused({Path("checks.py"): text})[Path("checks.py")]
    assert "np.tanh" not in stripped and "_helper" not in stripped and "the solution" not in stripped
    assert '"""The grader\'s own value."""' in stripped and marks.BODY in stripped
    for line in ("SCALE = 2.0  # a constant the checks keep", "def test_check(worker):", "@expected"):
        assert line in stripped
    ast.parse(stripped)


def test_a_mark_inside_a_function_is_refused():
    nested = "from graders.kit.expected import expected\n\ndef f(a):\n    @expected\n    def g(x):\n        return x * a\n    return g\n"
    with pytest.raises(ValueError, match="top level"):
        strip_expected(nested, "checks.py")


def test_every_mark_of_the_package_is_at_the_top_of_an_exercise_module():
    marked = {}
    for path in sorted(catalog.EXERCISES_DIR.rglob("*.py")):
        _, names = strip_expected(path.read_text(), str(path))  # refuses a nested mark
        if names:
            marked[path.parent.name] = names
    # every exercise whose checks compute an expected value of their own marks it
    assert set(marked) >= {catalog.module_name(i) for i in catalog.available() if i != "quiz"}
    outside = [p for p in catalog.GRADERS_DIR.rglob("*.py") if catalog.EXERCISES_DIR not in p.parents
               and strip_expected(p.read_text(), str(p))[1]]
    assert outside == []


def test_the_copy_strips_the_quiz_explanations_and_the_catalogs_reference_lines():
    quiz = catalog.grader_file("quiz").read_text()
    stripped = without_explanations(quiz)
    assert "EXPLANATIONS: dict[int, str] = {}" in stripped and "16 bytes" not in stripped
    text = (catalog.GRADERS_DIR / "catalog.py").read_text()
    stripped = without_bench_edits(text)
    assert "jnp.tanh(x @ w)" in text and "jnp.tanh(x @ w)" not in stripped and "edit=()" in stripped
    ast.parse(stripped)


def test_the_copy_grades_on_its_public_seed(tmp_path):
    """installation_seed and the report read graders/public_seed, which only a release writes."""
    assert catalog.public_seed() is None  # the full package draws its own
    code = ("from pathlib import Path; from graders import catalog; from graders.runner import grading; "
            "catalog.public_seed_file = lambda: Path(r'%s'); print(grading.installation_seed())" % (tmp_path / "seed"))
    (tmp_path / "seed").write_text("1234\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1234"


# ---------------------------------------------------------------- what the public values give away

# The students' copy holds the graders' expected values for the inputs drawn on its public seed.
# Inputs that every grading draws alike would hand a learner the autograder's expected values
# too (to look up instead of computing), so each check draws from the grading seed. Known
# exceptions, each with why a lookup of the public values still fails:
ALIKE_ON_EVERY_SEED = {
    # The scale rule's inputs are a few powers of two and counters, so seeds repeat them; the stub
    # states the rule whole, so its values say nothing the stub does not.
    ("ex8_loss_scaling", "rule"),
}
SOME_ALIKE = {
    # The grid, the chapter's own case and the threshold's fixed edges: each check that reads them
    # also reads cases drawn from the grading seed, which a lookup cannot answer.
    ("ex4_master_weights", "bf16_steps"), ("ex4_master_weights", "bf16_steps_rounded"),
    ("ex4_master_weights", "fp32_steps"), ("ex4_master_weights", "fp32_closed_forms"),
    ("ex4_master_weights", "threshold"), ("ex4_master_weights", "threshold_rounded"),
    # The memory figures of the grader's own program on configurations drawn from a few (each one
    # costs compiles): two gradings may draw the same. Not a leak of the program itself, but the
    # public figures would answer temp_memory_bytes where the configurations coincide (README).
    ("ex2_sqrt_checkpointing", "own_temp"), ("ex2_sqrt_checkpointing", "own_residual_bytes"),
}
# Two seeds on which no exercise happens to draw the same configuration (tests/test_drawn_configurations.py
# tries many seeds for the configurations themselves).
SEEDS = (2026, 7)


def recorded_calls(ex_id: str, seed: int, folder: Path) -> dict[str, set[str]]:
    """{marked function: the keys of its calls} when the reference is graded on `seed`."""
    calls = folder / f"calls-{seed}"
    env = dict(os.environ, **{settings.RECORD_EXPECTED: str(calls), settings.EXPECTED_DIR: str(folder / f"figures-{seed}"),
                              settings.NO_RESIDENT: "1"})
    run = subprocess.run([sys.executable, "-m", "graders", ex_id, "--solutions", str(ROOT / "reference"), "--seed",
                          str(seed)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    folders = [p for p in calls.iterdir() if p.is_dir()] if calls.is_dir() else []
    return {fn.name: {k.name for k in fn.iterdir() if not k.name.endswith(".tmp")} for ex in folders for fn in ex.iterdir()}


@pytest.mark.course
@pytest.mark.parametrize("ex_id", [i for i in catalog.available() if i != "quiz"])
def test_no_expected_value_of_one_grading_is_recorded_for_another(ex_id, tmp_path):
    module = catalog.module_name(ex_id)
    first, second = (recorded_calls(ex_id, seed, tmp_path) for seed in SEEDS)
    assert set(first) == set(second) and first, "the same marked functions are called on every seed"
    for name in first:
        alike = first[name] & second[name]
        if (module, name) in ALIKE_ON_EVERY_SEED or not alike:
            continue
        assert (module, name) in SOME_ALIKE, (
            f"{module}.{name}: {len(alike)} of {len(first[name])} calls take the same inputs on seeds {SEEDS}: "
            "draw them from the grading seed (the `seed` fixture)")
        assert alike != first[name], f"{module}.{name}: every call is alike on both seeds, none drawn"
