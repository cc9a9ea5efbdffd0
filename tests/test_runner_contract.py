"""The grading command keeps its contract (README, "For instructors"): statuses, scores, exit
codes, and Gradescope's results.json."""

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from grading import ROOT, grade
from graders import catalog
from graders.runner.points import read_checks

EXERCISES = catalog.available()


@pytest.mark.parametrize("ex_id", EXERCISES)
def test_reference_gets_full_marks(reference_run, ex_id):
    ex = reference_run.exercise(ex_id)
    assert ex["status"] == "passed", f"{ex_id}: {ex}\n{reference_run.report}"
    assert ex["score"] == ex["max_score"] > 0


def test_reference_run_exits_zero(reference_run):
    assert reference_run.returncode == 0, reference_run.report + reference_run.stderr


@pytest.mark.parametrize("ex_id", EXERCISES)
def test_stub_reads_not_attempted(stub_run, ex_id):
    ex = stub_run.exercise(ex_id)
    assert (ex["status"], ex["score"]) == ("not attempted", 0), f"{ex_id}: {ex}"
    for test in stub_run.results["tests"]:
        if test["tags"] == [ex_id]:
            assert test["output"].startswith("not attempted yet"), test


def test_stub_run_exits_one_without_tracebacks(stub_run):
    assert stub_run.returncode == 1
    assert "Traceback" not in stub_run.report + stub_run.stderr
    assert "not attempted" in stub_run.report


# The fields Gradescope's autograder specification defines; results.json holds no other.
GRADESCOPE_TOP = {"score", "execution_time", "output", "output_format", "test_output_format",
                  "test_name_format", "visibility", "stdout_visibility", "extra_data", "tests", "leaderboard"}
GRADESCOPE_TEST = {"score", "max_score", "status", "name", "name_format", "number", "output",
                   "output_format", "tags", "visibility", "extra_data"}


def test_json_follows_gradescope_schema(reference_run):
    results = reference_run.results
    assert set(results) <= GRADESCOPE_TOP
    assert isinstance(results["score"], int) and isinstance(results["execution_time"], float)
    assert results["output_format"] == "md" and results["output"].startswith("```\n")
    assert results["score"] == sum(t["score"] for t in results["tests"])
    for test in results["tests"]:
        assert set(test) <= GRADESCOPE_TEST and test["visibility"] == "visible"
        ex_id, check = test["name"].split(": ", 1)
        assert test["tags"] == [ex_id] and test["status"] in ("passed", "failed")
        assert isinstance(test["score"], int) and isinstance(test["max_score"], int)


def test_printed_total_and_json_agree(reference_run):
    total = next(line for line in reference_run.report.splitlines() if line.strip().startswith("total"))
    assert total.split()[-1] == f"{reference_run.results['score']}/{sum(t['max_score'] for t in reference_run.results['tests'])}"


def test_an_exercise_that_cannot_be_graded_lists_every_check_with_0_and_its_reason(tmp_path):
    """Every submission has the same test names (Gradescope's per-test statistics compare them)."""
    (tmp_path / "ex4_master_weights.py").write_text("raise RuntimeError('boom')\n")
    run = grade(tmp_path, ["ex4", "ex1"])  # ex1's module is missing
    for ex_id, words in (("ex4", "RuntimeError: boom"), ("ex1", "missing: the folder graded holds no ex1_")):
        entries = [t for t in run.results["tests"] if t["tags"] == [ex_id]]
        declared = {c.name: c.points for c in read_checks(catalog.grader_file(ex_id))}
        assert {t["name"]: t["max_score"] for t in entries} == {f"{ex_id}: {n}": p for n, p in declared.items()}
        assert all(t["score"] == 0 and t["status"] == "failed" and words in t["output"] for t in entries), entries
    assert run.exercise("ex1")["status"] == "missing" and str(tmp_path) not in run.exercise("ex1")["reason"]


@pytest.mark.parametrize("ex_id", EXERCISES)
def test_points_in_json_are_those_declared_in_the_grader(reference_run, ex_id):
    declared = {c.name: c.points for c in read_checks(catalog.grader_file(ex_id))}
    reported = {t["name"].split(": ", 1)[1]: t["max_score"] for t in reference_run.results["tests"]
                if t["tags"] == [ex_id]}
    assert reported == declared


@pytest.mark.parametrize("ex_id", EXERCISES)
def test_every_check_has_a_docstring(ex_id):
    assert all(c.doc for c in read_checks(catalog.grader_file(ex_id)))


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "graders", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_unknown_exercise_is_a_usage_error():
    proc = run_cli("ex99")
    assert proc.returncode == 2 and "unknown exercise" in proc.stderr


def test_missing_solutions_folder_is_a_usage_error():
    proc = run_cli("--solutions", "no/such/folder")
    assert proc.returncode == 2 and "no such folder" in proc.stderr


def test_missing_module_is_reported_not_a_crash():
    with tempfile.TemporaryDirectory() as tmp:
        run = grade(Path(tmp), ["ex1"])
    ex = run.exercise("ex1")
    assert run.returncode == 1 and ex["status"] == "missing" and ex["reason"].startswith("missing")
    assert "ex1_token_accumulation.py" in run.report


def test_report_keeps_the_requested_order_when_graded_in_parallel():
    run = grade(ROOT / "reference", ["quiz", "ex4", "ex1"], "--jobs", "3")
    # Rows are first printed as exercises finish; the final table starts at its header.
    table = run.report[run.report.index("  id    exercise"):]
    rows = [line.split()[0] for line in table.splitlines() if line.startswith("  ") and line.split()
            and line.split()[0] in ("quiz", "ex4", "ex1")]
    assert rows[:3] == ["quiz", "ex4", "ex1"]
    assert [t["tags"][0] for t in run.results["tests"]] == sorted(
        [t["tags"][0] for t in run.results["tests"]], key=["quiz", "ex4", "ex1"].index)


def test_every_module_the_makefile_runs_exists():
    # `make clean` runs its line with `|| true`: a module renamed away would fail silently there,
    # leaving the kept fork servers running.
    import importlib.util
    import re

    text = (ROOT / "Makefile").read_text()
    named = set(re.findall(r"-m (graders[\w.]*)", text)) | set(re.findall(r"from (graders[\w.]*) import", text))
    imported = re.findall(r"from (graders[\w.]*) import (\w+)", text)
    assert "graders.runner" in named and "graders.course.bench" in named
    for module in sorted(named):
        assert importlib.util.find_spec(module) is not None, f"the Makefile runs {module}, which does not exist"
    for module, name in imported:
        assert importlib.util.find_spec(f"{module}.{name}") is not None, f"the Makefile imports {module}.{name}"
