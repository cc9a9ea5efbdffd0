"""`from graders import check; check("ex1")`: grading from a notebook or a REPL.

Grades in child processes exactly as `make grade` does (the kernel's own JAX, whatever its
devices and platform, is never touched: the children run on the CPU with 8 simulated devices),
displays the report (an HTML table in a notebook, text elsewhere) and returns the result.
"""

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from graders import catalog
from graders.runner import grading
from graders.app import report


@dataclass
class CheckOutcome:
    exercise: str
    name: str
    outcome: str  # passed / failed / not_attempted / not_run
    score: int
    points: int
    message: str


class Result:
    """What check() returns: score, max_score, status, and every check's outcome and message.
    In a notebook, `result` alone as a cell's last line shows its report again."""

    def __init__(self, results: list[grading.ExerciseResult], text: str, html: str):
        self.exercises = results
        self.score = sum(r.score for r in results)
        self.max_score = sum(r.max_score for r in results)
        statuses = {r.status for r in results}
        self.status = statuses.pop() if len(statuses) == 1 else (
            "passed" if statuses <= {"passed"} else "partial")
        self.checks = [CheckOutcome(r.ex_id, c.name, c.outcome, c.score, c.points, c.message)
                       for r in results for c in r.checks]
        self.report = text
        self.html = html
        self._shown_in: int | None = None  # the notebook cell check() showed the report in

    def _repr_html_(self) -> str | None:
        # `check("ex1")` as a cell's last line has shown the report already: the cell's result
        # is then the one-line repr, not the same table twice.
        if self._shown_in is not None and self._shown_in == _cell():
            return None
        return self.html

    def __repr__(self) -> str:
        ids = " ".join(r.ex_id for r in self.exercises)
        return f"<graders result {ids}: {self.status}, {self.score}/{self.max_score}>"

    def __str__(self) -> str:
        return self.report


def _python() -> str:
    # A notebook kernel may be another interpreter than the package's: the children use the
    # package's own environment when there is one, so they grade on the pinned versions.
    venv = catalog.ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def _shell():
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None


def _in_notebook() -> bool:
    return getattr(_shell(), "kernel", None) is not None


def _cell() -> int | None:
    """Which cell the notebook is running (IPython counts them; the count moves on after each)."""
    return getattr(_shell(), "execution_count", None)


def check(exercise: str | list[str], solutions: str | os.PathLike = "exercises", *,
          timeout: float = grading.DEFAULT_TIMEOUT, seed: int | None = None, display: bool = True) -> Result:
    """Grade one exercise (or a list of them) of the folder `solutions` and show the report."""
    ids = [exercise] if isinstance(exercise, str) else list(exercise)
    unknown = [i for i in ids if i not in catalog.available()]
    if unknown:
        raise ValueError(f"unknown exercise id(s) {unknown}; choose from {catalog.available()}")
    folder = Path(solutions)
    if not folder.is_absolute() and not folder.is_dir() and (catalog.ROOT / folder).is_dir():
        folder = catalog.ROOT / folder  # a kernel started elsewhere still finds exercises/
    if not folder.is_dir():
        raise FileNotFoundError(f"no folder {solutions}")
    options = grading.Options(timeout=timeout, seed=grading.installation_seed() if seed is None else seed,
                              force_cpu=True, python=_python(), jobs=min(len(ids), os.cpu_count() or 1),
                              keep_server=True)
    results = grading.grade_many(ids, folder.resolve(), options)
    call = report.repeat_call(ids, options.seed, None if str(solutions) == "exercises" else str(solutions))
    result = Result(results, report.format_report(results, folder, options.seed, verbose=True),
                    report.html_report(results, options.seed, call))
    if display:
        if _in_notebook():
            from IPython.display import HTML
            from IPython.display import display as show

            show(HTML(result.html))
            result._shown_in = _cell()
        else:
            print(result.report)
    return result
