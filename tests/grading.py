"""Running the grading command the way a learner or an instructor does, and reading its JSON."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus"
RIGHT = ROOT / "tests" / "right"  # right solutions written otherwise than reference/

sys.path.insert(0, str(ROOT))
from graders import catalog  # noqa: E402
from graders.runner import grading, launch
from graders.app import report
from graders.runner.points import read_checks  # noqa: E402


@dataclass
class Run:
    returncode: int
    report: str
    stderr: str
    results: dict

    def exercise(self, ex_id: str) -> dict:
        return self.results["extra_data"]["exercises"][ex_id]

    def check(self, ex_id: str, name: str) -> dict:
        for test in self.results["tests"]:
            if test["name"] == f"{ex_id}: {name}":
                return test
        raise KeyError(f"no check {name!r} in {ex_id}")

    def lost(self, ex_id: str) -> dict[str, str]:
        """check name -> message, for every check of ex_id that did not get its points (an
        exercise that could not be graded loses every check, with its reason)."""
        ex = self.exercise(ex_id)
        return {name: check["message"] or ex["reason"] for name, check in ex["checks"].items()
                if check["outcome"] != "passed"}


# The maintainer tests grade with one fixed seed, so a run is repeatable; the graders' own tests
# (tests/test_drawn_configurations.py) try others. GRADERS_TEST_SEED picks another.
TEST_SEED = int(os.environ.get("GRADERS_TEST_SEED", "20261130"))


def grade(solutions: Path, ids=(), *extra: str, timeout: float = 900) -> Run:
    """The grading command, as a learner or an instructor runs it."""
    seed = () if "--seed" in extra else ("--seed", str(TEST_SEED))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results.json"
        proc = subprocess.run(
            [sys.executable, "-m", "graders", *ids, "--solutions", str(solutions), "--json", str(out), *seed, *extra],
            cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        results = json.loads(out.read_text()) if out.exists() else {}
    return Run(proc.returncode, proc.stdout, proc.stderr, results)


def alive_with_seed(seed: int) -> list[int]:
    """Processes whose environment carries this run's seed: every process of a grading run does."""
    alive = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if f"GRADERS_SEED={seed}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                    alive.append(int(entry.name))
            except OSError:
                continue
    return alive


def declared(ex_id: str) -> dict[str, int]:
    """check name -> points, as the exercise's grader declares them."""
    return {c.name: c.points for c in read_checks(catalog.grader_file(ex_id))}


def technique_free_cases(ex_id: str) -> list[str]:
    """The wrong solutions of ex_id that declare `technique: none`."""
    return [case for case in corpus_cases(ex_id) if technique_free(ex_id, case)]


def corpus_cases(ex_id: str, corpus: Path = CORPUS) -> list[str]:
    folder = corpus / ex_id
    return sorted(p.stem for p in folder.glob("*.py")) if folder.is_dir() else []


def grade_corpus(ex_id: str, base_env: dict | None = None, corpus: Path = CORPUS) -> dict[str, Run]:
    """Grade every solution in <corpus>/<ex_id>/ (the wrong ones of tests/corpus by default),
    each in a folder of its own, through the same grading code as the command, from one fork
    server (the libraries imported once), one case per CPU at a time, in `base_env` (default:
    this process's environment)."""
    module = catalog.module_name(ex_id)
    cases = corpus_cases(ex_id, corpus)
    options = grading.Options(seed=TEST_SEED, jobs=1)
    launcher = launch.launcher([ex_id], options.env(base_env))

    def one(case: str) -> Run:
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copy(corpus / ex_id / f"{case}.py", Path(tmp) / f"{module}.py")
            start = time.monotonic()
            result = grading.grade_exercise(ex_id, Path(tmp), options, launcher)
            text = report.format_report([result], Path(tmp), TEST_SEED, verbose=True)
            results = report.results_json([result], text, time.monotonic() - start, TEST_SEED)
            return Run(0 if result.status == "passed" else 1, text, "", results)

    try:
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            return dict(zip(cases, pool.map(one, cases)))
    finally:
        launcher.close()


def technique_free(ex_id: str, case: str) -> bool:
    """Whether a wrong solution declares `technique: none`: every number right, the technique not
    doing the work. The README's grading policy says such a solution scores at most half."""
    import ast

    doc = ast.get_docstring(ast.parse((CORPUS / ex_id / f"{case}.py").read_text())) or ""
    return any(line.startswith("technique: none") for line in doc.splitlines())


def expectations(ex_id: str, case: str) -> list[tuple[str, str]]:
    """The (check, words) pairs a wrong solution declares in its docstring as
    `loses: <check>: <words its message must contain>`."""
    import ast

    doc = ast.get_docstring(ast.parse((CORPUS / ex_id / f"{case}.py").read_text())) or ""
    return [tuple(part.strip() for part in line.removeprefix("loses:").split(":", 1))
            for line in doc.splitlines() if line.startswith("loses:")]


def grader_module(ex_id: str, probes: bool = False):
    """The module of ex_id's checks (or of its probes), imported by the path catalog.py gives it,
    so that a test reads a grader's helpers wherever its file lives."""
    import importlib

    path = (catalog.probes_file if probes else catalog.grader_file)(ex_id)
    return importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
