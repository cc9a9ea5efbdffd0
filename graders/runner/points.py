"""Read the checks and their points from a grader file without importing it.

The parent process awards points from this table, not from anything the grading child
reports, so a child (or the learner code inside it) cannot change what a check is worth.
"""

import ast
from dataclasses import dataclass
from pathlib import Path


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
    tree = ast.parse(path.read_text(), filename=str(path))
    checks = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            pts = [p for p in map(_points, node.decorator_list) if p is not None]
            if len(pts) != 1:
                raise ValueError(f"{path.name}: {node.name} needs exactly one @pytest.mark.points(N)")
            doc = (ast.get_docstring(node) or "").strip().splitlines()
            checks.append(Check(node.name.removeprefix("test_"), pts[0], doc[0] if doc else ""))
    return checks
