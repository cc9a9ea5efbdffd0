"""Whatever the learner's Exercise 1 does, it gets a clear status and reason within its limit,
and an exercise graded in the same run (a correct Exercise 4) still gets its marks."""

import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grading import ROOT, grade

REFERENCE = (ROOT / "reference" / "ex1_token_accumulation.py").read_text()
LIMIT = 10.0  # seconds per exercise for these runs: ex1 grades in about 1 s; the endless loop is stopped

# case -> the learner's ex1_token_accumulation.py
MODULES = {
    "syntax_error": "def tok_loss_sum_count(w, x, y, m)\n    return 0\n",
    "exception_at_import": "import numpy\n\nraise RuntimeError('boom at import')\n",
    "os_exit_at_import": "import os\n\nos._exit(3)\n",
    "sys_exit_in_function": REFERENCE + "\n\ndef accum_token_weighted(*args, **kwargs):\n    import sys\n    sys.exit(1)\n",
    "endless_loop": REFERENCE + "\n\ndef tok_loss_sum_count(*args):\n    while True:\n        pass\n",
    "megabytes_of_printing": "print('x' * 5_000_000)\n" + REFERENCE
    + "\n\n_inner = accum_token_weighted\n\n\ndef accum_token_weighted(*a, **k):\n    print('y' * 1_000_000)\n    return _inner(*a, **k)\n",
    "interpreter_crash": REFERENCE + "\n\ndef accum_token_weighted(*args, **kwargs):\n    import ctypes\n    return ctypes.string_at(0)\n",
    "wrong_return_types": REFERENCE + "\n\ndef tok_loss_sum_count(*args):\n    return 'loss'\n\n\n"
    "def accum_token_weighted(*args, **kwargs):\n    return [1.0, 2.0]\n",
    "missing_function": REFERENCE + "\n\ndel accum_token_weighted\n",
    "nan_results": REFERENCE + "\n\ndef accum_token_weighted(w, *args, **kwargs):\n    return w * jnp.nan\n",
    "replaces_comparisons": "import numpy as np\nimport numpy.testing\nimport jax.numpy as jnp\n\n"
    "np.allclose = lambda *a, **k: True\nnumpy.testing.assert_allclose = lambda *a, **k: None\n"
    "jnp.allclose = lambda *a, **k: True\n\n\ndef tok_loss_sum_count(w, x, y, m):\n    return 0.0, 0.0\n\n\n"
    "def accum_token_weighted(w, x, y, m, n_micro):\n    return w * 0\n",
    "replaces_comparisons_when_called": REFERENCE.replace("import jax\n", "import jax\nimport numpy as _np\n", 1)
    + "\n\ndef tok_loss_sum_count(w, x, y, m):\n    _np.allclose = lambda *a, **k: True\n    return 0.0, 0.0\n",
    # the store of the graders' own figures (graders/kit/figure_store.py), which takes them from graders/kit/figure_store.py
    "replaces_the_figure_store": REFERENCE + "\n\nimport graders.kit.figure_store\n\n"
    "graders.kit.figure_store.stored = lambda name, key, compute, write=True: compute()\n",
    # a method of a graders class: how the figures worked out in a forked process are read
    "replaces_a_graders_method": REFERENCE + "\n\nimport graders.kit.forked\n\n"
    "graders.kit.forked.Forked.message = lambda self, index: {'value': 0}\n",
    "atexit_rewrites_json": "import atexit, glob, json, os\n\n\ndef _cheat():\n"
    "    for path in glob.glob('/tmp/**/*.json', recursive=True) + glob.glob('**/*.json', recursive=True):\n"
    "        try:\n            data = json.load(open(path))\n            data['score'] = 999\n"
    "            json.dump(data, open(path, 'w'))\n        except Exception:\n            pass\n\n\n"
    "atexit.register(_cheat)\n\n\ndef tok_loss_sum_count(w, x, y, m):\n    return 0.0, 0.0\n\n\n"
    "def accum_token_weighted(w, x, y, m, n_micro):\n    return w * 0\n",
}


def _grade_case(case: str):
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "ex1_token_accumulation.py").write_text(MODULES[case])
        shutil.copy(ROOT / "reference" / "ex4_master_weights.py", tmp)
        start = time.monotonic()
        run = grade(Path(tmp), ["ex1", "ex4"], "--timeout", str(LIMIT))
        return run, time.monotonic() - start


@pytest.fixture(scope="module")
def runs():
    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip(MODULES, pool.map(_grade_case, MODULES)))


@pytest.mark.parametrize("case", sorted(MODULES))
def test_other_exercise_still_gets_its_marks(runs, case):
    run, _ = runs[case]
    assert run.exercise("ex4")["status"] == "passed", run.report


@pytest.mark.parametrize("case", sorted(MODULES))
def test_finishes_within_its_limit_without_grader_tracebacks(runs, case):
    run, seconds = runs[case]
    assert seconds < 2 * LIMIT + 20
    assert "Traceback" not in run.report
    assert run.exercise("ex1")["status"] != "passed" or case == "megabytes_of_printing"


# case -> (status of ex1, words in its reason or in a check's message)
EXPECTED = {
    "syntax_error": ("error", "SyntaxError"),
    "exception_at_import": ("error", "RuntimeError: boom at import (ex1_token_accumulation.py, line 3"),
    "os_exit_at_import": ("error", "exit code 3) while importing your module"),
    "sys_exit_in_function": ("partial", "your code raised SystemExit"),
    "endless_loop": ("timed out", f"stopped after the {LIMIT:g} s limit while running check"),
    "interpreter_crash": ("error", "SIGSEGV) while running check"),
    "wrong_return_types": ("partial", "got str"),
    "nan_results": ("partial", "NaN"),
    "missing_function": ("partial", "ex1_token_accumulation.py defines no `accum_token_weighted`"),
    "replaces_comparisons": ("error", "numpy.allclose"),
    "replaces_comparisons_when_called": ("error", "numpy.allclose"),
    "replaces_the_figure_store": ("error", "graders.kit.figure_store.stored"),
    "replaces_a_graders_method": ("error", "graders.kit.forked.Forked.message"),
}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_status_and_reason_say_what_happened(runs, case):
    run, _ = runs[case]
    status, words = EXPECTED[case]
    ex = run.exercise("ex1")
    text = ex["reason"] + " ".join(t["output"] for t in run.results["tests"] if t["tags"] == ["ex1"])
    assert ex["status"] == status, run.report
    assert words in text, run.report


def test_syntax_error_names_file_and_line(runs):
    reason = runs["syntax_error"][0].exercise("ex1")["reason"]
    assert "ex1_token_accumulation.py, line 1" in reason


def test_wrong_types_get_a_message_not_a_traceback(runs):
    run, _ = runs["wrong_return_types"]
    lost = run.lost("ex1")
    assert "should return a pair (loss_sum, n_valid), got str" in lost["loss_sum_counts_only_valid_tokens"]
    assert "expected shape (5,), got shape (2,)" in lost["gradient_matches_full_batch"]


def test_printing_is_cut_and_a_correct_module_still_passes(runs):
    run, _ = runs["megabytes_of_printing"]
    assert run.exercise("ex1")["status"] == "passed"
    assert len(run.report) < 20_000 and len(run.results["output"]) < 20_000


def test_replacing_comparisons_gains_nothing(runs):
    for case in ("replaces_comparisons", "replaces_comparisons_when_called"):
        run = runs[case][0]
        assert run.exercise("ex1")["score"] == 0
        assert all("numpy.allclose" in message for message in run.lost("ex1").values())


def test_atexit_handler_cannot_rewrite_results(runs):
    run, _ = runs["atexit_rewrites_json"]
    ex = run.exercise("ex1")
    assert ex["score"] == 0 and run.results["score"] == run.exercise("ex4")["score"]
