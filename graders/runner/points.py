"""Read the checks and their points from a grader file without importing it.

The parent process awards points from this table, not from anything the grading child
reports, so a child (or the learner code inside it) cannot change what a check is worth.
"""

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

from graders import catalog


@dataclass(frozen=True)
class Check:
    name: str  # the test function's name without "test_"
    points: int
    doc: str


def _points(decorator: ast.expr) -> int | None:
    # matches @pytest.mark.points(N)
    if (
        isinstance(decorator, ast.Call)
        and isinstance(decorator.func, ast.Attribute)
        and decorator.func.attr == "points"
        and decorator.args
        and isinstance(decorator.args[0], ast.Constant)
        and isinstance(decorator.args[0].value, int)
    ):
        return decorator.args[0].value
    return None


def read_checks(path: Path) -> list[Check]:
    return list(_checks_of(path.read_text(), str(path)))


@functools.lru_cache(maxsize=64)
def _checks_of(text: str, path: str) -> tuple[Check, ...]:
    # Kept by the file's text: a process that grades many solutions (batch, the maintainer
    # tests: about 500 gradings) parses each grader file once, not 50 ms of AST per grading.
    tree = ast.parse(text, filename=path)
    checks = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            pts = [p for p in map(_points, node.decorator_list) if p is not None]
            if len(pts) != 1:
                raise ValueError(f"{Path(path).name}: {node.name} needs exactly one @pytest.mark.points(N)")
            doc = (ast.get_docstring(node) or "").strip().splitlines()
            checks.append(Check(node.name.removeprefix("test_"), pts[0], doc[0] if doc else ""))
    return tuple(checks)


def after_due(ids: list[str], specs) -> set[tuple[str, str]]:
    """(exercise, check) pairs named by --after-due's `ID` (every check of it) or `ID:CHECK`
    items (also given as one string, spaces or commas between them); ValueError on a name that
    is not one of the exercises `ids` or one of their checks. The runner's --after-due and
    `make autograder AFTER_DUE=` read it alike."""
    chosen = set()
    for spec in (part for item in specs for part in item.replace(",", " ").split()):
        ex_id, _, check = spec.partition(":")
        if ex_id not in ids:
            raise ValueError(f"--after-due {spec}: {ex_id} is not an exercise graded here ({' '.join(ids)})")
        names = [c.name for c in read_checks(catalog.grader_file(ex_id))]
        if check and check not in names:
            raise ValueError(f"--after-due {spec}: {ex_id} has no check {check}; its checks: {', '.join(names)}")
        chosen |= {(ex_id, name) for name in names if not check or name == check}
    return chosen
