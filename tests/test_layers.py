"""Imports in graders/ point one way, and none closes a cycle: every import counts, those inside
functions too. The order, from the top (graders/README.md draws it):

    graders (check, python -m graders) → app → course → runner → child → exercises → kit → catalog, settings

A module may import its own folder's modules and those of any folder below it. An exercise's
folder imports the kit and itself, never another exercise.
"""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRADERS = ROOT / "graders"
ORDER = ("graders", "app", "course", "runner", "child", "exercises", "kit", "base")


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(GRADERS.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The graders modules `name` imports, anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets |= {base} | {f"{base}.{a.name}" for a in node.names}
    found = set()
    for target in targets:
        while target and target not in MODULES:
            target = target.rpartition(".")[0]
        if target and target != name and target != "graders":
            found.add(target)
    return found


EDGES = {name: _imports(name, path) for name, path in MODULES.items()}


def layer(name: str) -> str:
    parts = name.split(".")
    if len(parts) == 1 or name in ("graders.__main__",):
        return "graders"
    if parts[1] in ("catalog", "settings"):
        return "base"
    return parts[1]


def test_every_module_is_in_a_folder_that_says_which_process_runs_it():
    loose = [n for n in MODULES if layer(n) not in ORDER]
    assert not loose, f"modules outside the layers {ORDER}: {loose}"
    top = sorted(p.name for p in GRADERS.glob("*.py"))
    assert top == ["__init__.py", "__main__.py", "catalog.py", "settings.py"], top


def test_imports_point_down():
    upward = [f"{a} imports {b}" for a, targets in EDGES.items() for b in targets
              if ORDER.index(layer(b)) < ORDER.index(layer(a))]
    assert not upward, "imports that point up:\n" + "\n".join(sorted(upward))


def test_an_exercise_imports_no_other_exercise():
    crossing = [f"{a} imports {b}" for a, targets in EDGES.items() if layer(a) == "exercises"
                for b in targets if layer(b) == "exercises" and b.split(".")[:3] != a.split(".")[:3]
                and len(b.split(".")) > 2]
    assert not crossing, crossing


def test_no_import_cycle():
    cycles = []
    for start in EDGES:
        stack = [(start, (start,))]
        while stack:
            node, path = stack.pop()
            for nxt in EDGES[node]:
                if nxt == start:
                    cycles.append(" -> ".join(path + (start,)))
                elif nxt not in path and nxt > start:  # each cycle once, from its least module
                    stack.append((nxt, path + (nxt,)))
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_layer_test_sees_imports_inside_functions():
    # The cycle this test was written against hid in an import inside a function.
    assert "graders.runner.forkserver" in EDGES["graders.runner.kept_server"]
    assert "graders.child.session" in EDGES["graders.runner.forkserver"]


def test_the_runner_starts_without_numpy_or_jax():
    # The runner only forks and reports; NumPy alone added about 100 ms to every `make grade`.
    code = ("import sys, graders.app.cli, graders.runner.kept_server, graders.runner.forkserver; "
            "print(sorted(m for m in ('numpy', 'jax', 'ml_dtypes', 'pytest') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
