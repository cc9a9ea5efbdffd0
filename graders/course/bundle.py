"""What an instructor hands out: the students' copy and the Gradescope autograder.

    python -m graders.course.bundle release [--out dist/student] [--self-study] [--public-seed N]
        exercises/ (the stubs), graders/ without the quiz key, Makefile, pyproject.toml and a
        README without the instructors' and maintainers' sections. No reference/, no tests/.
        A course's copy (the default) holds public checks: the graders' own expected-value code
        (@expected, graders/kit/expected.py) is replaced by its values on a public seed, recorded
        by grading the reference once, and the quiz has no explanations. --self-study keeps the
        full checks.
    python -m graders.course.bundle autograder [--out dist/autograder.zip] [--minutes 10]
        setup.sh and run_autograder at the root of the zip, following Gradescope's autograder
        contract; the package (with the quiz key and, until setup.sh deletes it, reference/) beside them.
    python -m graders.course.bundle locate FOLDER
        prints the folder inside FOLDER that holds the exercise modules (a submission may be
        the files themselves or a folder that contains them); prints nothing when there is none.

Nothing here imports JAX; run_autograder and graders.course.batch call the runner as a subprocess.
"""

import argparse
import ast
import os
import re
import shutil
import stat
import sys
import tomllib
import zipfile
from pathlib import Path

from graders import catalog, settings
from graders.runner.grading import budget_limits

ROOT = catalog.ROOT

# README sections (top-level "## " headings) that are not for students.
STUDENT_README_DROPS = ("For instructors", "For maintainers")

# Never in the students' copy: solutions, the package's own tests, the quiz key.
QUIZ_KEY = catalog.quiz_key_file().relative_to(catalog.ROOT)
RELEASE_TOP = ("exercises", "graders", "Makefile", "pyproject.toml")
JUNK = ("__pycache__", "*.pyc", ".pytest_cache", ".cache")

# A course's students' copy grades on this seed, with the expected values recorded for it
# (`--public-seed` picks another). The autograder draws its own: the hidden draws stay hidden.
PUBLIC_SEED = 2026

# Gradescope's default limits: 10 minutes for one submission, 768 MB, a fraction of a CPU.
DEFAULT_MINUTES = 10
MARGIN_SECONDS = 60  # starting Python, finding the modules, writing results.json
# Seconds past the runner's budget after which run_autograder stops it (a runner that does not end
# on time); what is left of the margin then moves its last results.json into place.
HARD_STOP_AFTER = 25
# Shown to students only after the due date unless `make autograder AFTER_DUE=...` says otherwise:
# a quiz check's message explains the right answer, so one visible submission would give the key.
DEFAULT_AFTER_DUE = ("quiz",)


def student_readme(text: str, drops=STUDENT_README_DROPS) -> str:
    """README.md without the top-level sections named in `drops` (fenced code is never a heading)."""
    kept, skipping, fenced = [], False, False
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("## "):
            skipping = line[3:].strip() in drops
        elif not fenced and line.startswith("# "):
            skipping = False
        if not skipping:
            kept.append(line)
    return re.sub(r"\n{3,}", "\n\n", "".join(kept)).rstrip("\n") + "\n"


def _copytree(src: Path, dst: Path, skip=()) -> None:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(*JUNK, *skip))


def build_release(out: Path, root: Path = ROOT, self_study: bool = False, public_seed: int = PUBLIC_SEED) -> Path:
    """The students' copy. Course mode (the default): public checks, whose expected values are
    recorded as data by grading the reference once on `public_seed` (record_public), with no
    solution code (publish) and no quiz explanation. `self_study`: the full checks, as they are."""
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    _copytree(root / "exercises", out / "exercises")
    _copytree(root / "graders", out / "graders", skip=(QUIZ_KEY.name,))
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy2(root / name, out / name)
    (out / "README.md").write_text(student_readme((root / "README.md").read_text()))
    if not self_study:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="graders-public-") as folder:
            recorded = record_public(root, Path(folder), public_seed)
            publish(out / "graders", recorded, public_seed)
    return out


# ---------------------------------------------------------------- course mode: public checks

def record_public(root: Path, folder: Path, seed: int) -> dict[str, bytes]:
    """Grade the reference with the full graders on `seed`, recording every @expected call
    (graders/kit/expected.py): {exercise folder name: its public.wire}. The graders' own figures
    are computed afresh (an empty store), so that every one is recorded; fails unless the
    reference gets full marks."""
    import subprocess

    from graders.kit import expected

    calls, figures, results = folder / "calls", folder / "figures", folder / "results.json"
    env = dict(os.environ, **{settings.RECORD_EXPECTED: str(calls), settings.EXPECTED_DIR: str(figures),
                              settings.NO_RESIDENT: "1"})
    run = subprocess.run([sys.executable, "-m", "graders", "--solutions", str(root / "reference"), "--seed", str(seed),
                          "--jobs", "2", "--json", str(results)], cwd=root, env=env, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError("recording the public checks' expected values: the reference did not get full marks on "
                           f"seed {seed}:\n{run.stdout[-3000:]}{run.stderr[-2000:]}")
    return expected.collect(calls) if calls.is_dir() else {}


def _marked(node) -> bool:
    return any((isinstance(d, ast.Name) and d.id == "expected") or (isinstance(d, ast.Attribute) and d.attr == "expected")
               for d in node.decorator_list)


def _body_start(node) -> int:
    """The first line (1-based) of a function's body after its docstring."""
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first.end_lineno + 1
    return first.lineno


def strip_expected(text: str, path: str = "") -> tuple[str, list[str]]:
    """text with the body of every @expected function replaced by expected.BODY (its signature,
    decorators and docstring kept, every other line verbatim), and the names of those functions."""
    from graders.kit.expected import BODY

    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    names = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _marked(node) and node not in tree.body:
            raise ValueError(f"{path}: @expected {node.name} is not at the module's top level: a closure's values "
                             "would not be part of what a call is recorded under")
    for node in sorted((n for n in tree.body if isinstance(n, ast.FunctionDef) and _marked(n)),
                       key=lambda n: -n.lineno):
        start, end = _body_start(node), node.end_lineno
        indent = " " * (node.col_offset + 4)
        body = f"{indent}{BODY}\n"
        if start > end:  # a docstring alone
            lines.insert(end, body)
        else:
            lines[start - 1:end] = [body]
        names.append(node.name)
    return "".join(lines), sorted(names)


def _referenced(texts: list[str]) -> set[str]:
    names = set()
    for text in texts:
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.alias):
                names.add(node.name.rpartition(".")[2])
    return names


# Decorators that register a function with something that calls it by name (pytest, the probes'
# channel) or mark it (@expected): such a function is never "unused".
REGISTERING = ("fixture", "mark", "probe", "expected", "hookimpl")


def _plain(node) -> bool:
    """A function or class only the folder's code uses: not a check, and no registering decorator
    (jax.jit, functools.cache and the like do not count)."""
    return not node.name.startswith(("test_", "pytest_")) and not any(
        word in ast.unparse(d) for d in node.decorator_list for word in REGISTERING)


def drop_unused(texts: dict[Path, str]) -> dict[Path, str]:
    """Leave out the plain module-level functions and classes (not a check, no registering decorator)
    that no file of the folder uses any more: what only the removed bodies used (ex6's NumPy block,
    ex2's own program, ex5's unwrapped MLP)."""
    texts = dict(texts)
    while True:
        used = _referenced(list(texts.values()))
        dropped = False
        for path, text in texts.items():
            tree = ast.parse(text)
            dead = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                    and _plain(n) and n.name not in used]
            if not dead:
                continue
            lines = text.splitlines(keepends=True)
            for node in sorted(dead, key=lambda n: -n.lineno):
                start = (node.decorator_list[0].lineno if node.decorator_list else node.lineno) - 1
                while start > 0 and lines[start - 1].lstrip().startswith("#"):  # the comment above it
                    start -= 1
                end = node.end_lineno
                while end < len(lines) and not lines[end].strip() and end + 1 < len(lines) and not lines[end + 1].strip():
                    end += 1  # no run of blank lines left behind
                del lines[start:end]
            texts[path] = re.sub(r"\n{4,}", "\n\n\n", "".join(lines))  # two blank lines between what is left
            dropped = True
        if not dropped:
            return texts


def _assignment(tree, name: str):
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return node
    return None


def without_explanations(text: str) -> str:
    """The quiz's checks without EXPLANATIONS' text: they ship with the autograder only."""
    node = _assignment(ast.parse(text), "EXPLANATIONS")
    lines = text.splitlines(keepends=True)
    lines[node.lineno - 1:node.end_lineno] = [
        "EXPLANATIONS: dict[int, str] = {}  # the students' copy: the explanations ship with the autograder only\n"]
    return "".join(lines)


def without_bench_edits(text: str) -> str:
    """catalog.py without the exercises' `edit` pairs, which quote lines of the reference
    (make bench's edit loop needs the reference, which the students' copy has not)."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    spans = [kw.value for node in ast.walk(tree) if isinstance(node, ast.Call)
             for kw in node.keywords if kw.arg == "edit"]
    for value in sorted(spans, key=lambda v: (-v.lineno, -v.col_offset)):
        first, last = value.lineno - 1, value.end_lineno - 1
        head, tail = lines[first][:value.col_offset], lines[last][value.end_col_offset:]
        lines[first:last + 1] = [head + "()" + tail]
    return "".join(lines)


def publish(graders: Path, recorded: dict[str, bytes], seed: int) -> None:
    """Turn the copied graders/ into public checks: each exercise's recorded values beside it,
    no @expected body, nothing that only those bodies used, no quiz explanation, no reference
    line in the catalog, and the public seed."""
    from graders.kit.expected import PUBLIC_FILE

    exercises = graders / catalog.EXERCISES_DIR.relative_to(catalog.GRADERS_DIR)
    for folder in sorted(p for p in exercises.iterdir() if p.is_dir()):
        texts = {}
        for path in sorted(folder.glob("*.py")):
            text, names = strip_expected(path.read_text(), str(path))
            texts[path] = text
        for path, text in drop_unused(texts).items():
            path.write_text(text)
        if folder.name in recorded:
            (folder / PUBLIC_FILE).write_bytes(recorded[folder.name])
    quiz = graders / catalog.grader_file("quiz").relative_to(catalog.GRADERS_DIR)
    quiz.write_text(without_explanations(quiz.read_text()))
    catalog_file = graders / "catalog.py"
    catalog_file.write_text(without_bench_edits(catalog_file.read_text()))
    (graders / catalog.public_seed_file().relative_to(catalog.GRADERS_DIR)).write_text(f"{seed}\n")


# ---------------------------------------------------------------- finding a submission's modules

# Never a submission's modules: the package's own folders, which a student who zips their whole
# working folder sends too (reference/ holds every module, solved).
NOT_SOLUTIONS = ("graders", "reference", "tests", "dist", ".venv", "venv", "node_modules")
PREFERRED = "exercises"  # where the package keeps the learner's modules


def find_solutions(folder: Path) -> Path | None:
    """The folder under `folder` holding the learner's modules, or None when there is none:
    Gradescope unpacks a zip as it was made, with or without a folder. An `exercises/` folder
    holding any module wins (the shallowest); else the folder holding the most modules (the
    shallowest on a tie). The package's own folders (NOT_SOLUTIONS) are never looked into."""
    names = {f"{catalog.module_name(i)}.py" for i in catalog.EXERCISES}
    best, best_key = None, None
    for here, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")) and d not in NOT_SOLUTIONS)
        found = len(names & set(files))
        if found:
            depth = len(Path(here).relative_to(folder).parts)
            key = (Path(here).name != PREFERRED, -found if Path(here).name != PREFERRED else 0, depth, here)
            if best_key is None or key < best_key:
                best, best_key = Path(here), key
    return best


# ---------------------------------------------------------------- the Gradescope autograder

def grading_budget(minutes: float) -> int:
    """Seconds the runner may spend grading (`--budget`): it splits them among the exercises by
    their typical cost and grades one at a time, so a submission that loops in every exercise
    still gets its results.json within Gradescope's limit."""
    return int(minutes * 60 - MARGIN_SECONDS)


SETUP_SH = r"""#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image.
# AUTOGRADER_ROOT (default /autograder): source/ holds this zip unpacked.
# PYTHON: an interpreter >= 3.12 to use; otherwise one on PATH, otherwise python3.12 from the
# deadsnakes archive, installed beside the system's python3 (which apt itself needs: never replaced).
# GRADERS_SKIP_WARMUP=1 skips grading the reference solutions (only to test this script quickly).
set -euo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
SRC="$ROOT/source"
VENV="$ROOT/venv"

recent() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; }
has_venv() { "$1" -c 'import venv, ensurepip' >/dev/null 2>&1; }
PY=""
if [ -n "${PYTHON:-}" ]; then
  recent "$PYTHON" || { echo "PYTHON=$PYTHON is not a Python >= 3.12" >&2; exit 1; }
  PY="$PYTHON"
else
  for c in python3.14 python3.13 python3.12 python3; do
    if command -v "$c" >/dev/null && recent "$c"; then PY="$(command -v "$c")"; break; fi
  done
fi
export DEBIAN_FRONTEND=noninteractive
if [ -n "$PY" ] && ! has_venv "$PY"; then
  # Ubuntu's own python3.12 (24.04) ships venv's pip bootstrap in a separate package.
  apt-get update && apt-get install -y --no-install-recommends "python$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-venv"
fi
if [ -z "$PY" ]; then
  echo "No Python >= 3.12 here: installing python3.12 from the deadsnakes archive"
  apt-get update
  apt-get install -y --no-install-recommends software-properties-common
  add-apt-repository -y ppa:deadsnakes/ppa
  apt-get update
  apt-get install -y --no-install-recommends python3.12 python3.12-venv
  PY=/usr/bin/python3.12
fi
echo "Using $PY ($("$PY" -c 'import sys; print(sys.version.split()[0])'))"

rm -rf "$VENV"
"$PY" -m venv "$VENV"
# PIP_CACHE_DIR / PIP_FIND_LINKS from the environment are honoured (pip reads them itself).
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$SRC/requirements.txt"

cd "$SRC"
# The sandbox's level on this image: "namespaces", or "user" where they cannot be made (a default
# container); graders/child/sandbox.py and the README say what each promises.
echo "Sandbox isolation on this image: $("$VENV/bin/python" -c 'from graders.child import sandbox; print(sandbox.available() or sandbox.level())')"
# The exercises this assignment grades (make autograder EX=...): the reference is graded on these.
IDS=(@IDS@)
SEED_PER_SUBMISSION=@SEED_PER_SUBMISSION@  # make autograder SEED=per-submission
if [ "$SEED_PER_SUBMISSION" = 1 ]; then
  # Each submission's seed is drawn from a hash of its modules and this secret, made here, in
  # the image: readable by root only, and hidden from the sandboxed worker (catalog.secrets()).
  mkdir -p "$SRC/.cache"
  (umask 077; "$VENV/bin/python" -c 'import secrets; print(secrets.token_hex(32))' > "$SRC/.cache/submission_secret")
fi
if [ "${GRADERS_SKIP_WARMUP:-0}" != 1 ]; then
  # The reference is graded as students will be, under --sandbox: an image whose sandbox cannot
  # grade fails here, not on every submission. It also fills the compilation cache
  # (source/.cache/jax) with the graders' own programs and draws this image's grading seed
  # (source/.cache/seed). A sandboxed run never keeps a grading server: none is left running.
  GRADERS_NO_RESIDENT=1 "$VENV/bin/python" -m graders "${IDS[@]}" --solutions reference --jobs 1 --sandbox \
      --json "$ROOT/warmup.json" > "$ROOT/warmup.txt" \
    || { cat "$ROOT/warmup.txt"; echo "The reference solutions did not get full marks under --sandbox: see above." >&2; exit 1; }
  head -20 "$ROOT/warmup.txt"
fi
# The reference solutions never stay in the image that grades students.
rm -rf "$SRC/reference"
chmod +x "$SRC/run_autograder"
"""

RUN_AUTOGRADER = r"""#!/usr/bin/env bash
# Gradescope runs this for every submission. AUTOGRADER_ROOT (default /autograder):
# submission/ holds the student's files; results/results.json is what Gradescope reads.
ROOT="${AUTOGRADER_ROOT:-/autograder}"
SRC="$ROOT/source"
PY="$ROOT/venv/bin/python"
RESULTS="$ROOT/results/results.json"
mkdir -p "$ROOT/results"

# Written first, so a crash below still leaves Gradescope something true to show: every test of
# the assignment, as in every other submission, with 0.
cat > "$RESULTS" <<'JSON'
@FALLBACK@
JSON

# The runner's arguments, in one place. The exercises of this assignment; @BUDGET@ s shared among
# them by their typical cost, one at a time, and the whole run ends within them: a submission that
# loops in every exercise still ends within @MINUTES@ minutes, and an exercise the run does not
# reach lists each check with 0, "not graded: the run's time ran out". --sandbox: the
# submission's code runs confined (see the README). --after-due: results shown after the due date.
RUNNER_ARGS=(@IDS@ --jobs 1 --budget @BUDGET@ --sandbox@AFTER_DUE@)
# The last resort, if the runner itself outlives its budget: it is stopped, and the results.json
# it rewrote after each exercise stands.
HARD_LIMIT=@HARD@
SEED_PER_SUBMISSION=@SEED_PER_SUBMISSION@

cd "$SRC" || exit 0
# The modules may sit at the top or inside a folder; with none, every exercise reads "missing".
# Never graders/, reference/, tests/, dist/ or .venv/ of a whole working folder; exercises/ first.
SOLUTIONS="$("$PY" -m graders.course.bundle locate "$ROOT/submission")"
SOLUTIONS="${SOLUTIONS:-$ROOT/submission}"
LABEL="submission${SOLUTIONS#"$ROOT/submission"}"
SEED_ARGS=()
if [ "$SEED_PER_SUBMISSION" = 1 ]; then
  # This submission's seed: a hash of its modules and the image's secret (setup.sh).
  SEED_ARGS=(--seed "$("$PY" -m graders.course.bundle seed "$SOLUTIONS" @IDS@)") || SEED_ARGS=()
fi
timeout --kill-after=5 "$HARD_LIMIT" \
  "$PY" -m graders --solutions "$SOLUTIONS" --label "$LABEL" --json "$RESULTS.new" "${SEED_ARGS[@]}" "${RUNNER_ARGS[@]}"
# Only a complete results.json replaces the fallback.
if "$PY" -c 'import json, sys; json.load(open(sys.argv[1]))["tests"]' "$RESULTS.new" 2>/dev/null; then
  mv "$RESULTS.new" "$RESULTS"
fi
exit 0
"""


def requirements(root: Path = ROOT) -> str:
    return "\n".join(tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]) + "\n"


def _add(zf: zipfile.ZipFile, path: Path, arcname: str, executable: bool = False) -> None:
    info = zipfile.ZipInfo(arcname, date_time=(2026, 1, 1, 0, 0, 0))
    info.external_attr = ((0o755 if executable else 0o644) | stat.S_IFREG) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    zf.writestr(info, path.read_bytes() if isinstance(path, Path) else path)


def submission_seed(solutions: Path, ids: list[str], secret: bytes) -> int:
    """A submission's seed (`--seed-per-submission`): a hash of the secret and the modules of
    `ids` that `solutions` holds, in the range of an installation's seed. The same files give the
    same seed (a re-run reproduces a grading); without the secret it cannot be foreseen."""
    import hashlib

    h = hashlib.sha256(secret + b"\0")
    for ex_id in ids:
        path = Path(solutions) / f"{catalog.module_name(ex_id)}.py"
        if path.is_file() and not path.is_symlink():
            h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return int.from_bytes(h.digest()[:8], "big") % 1_000_000


def parse_ids(items) -> list[str]:
    """Exercise ids given as one string or several (spaces or commas between them), in the
    catalog's order; ValueError on an unknown one. None or nothing: every exercise."""
    named = [part for item in (items or []) for part in item.replace(",", " ").split()]
    unknown = [i for i in named if i not in catalog.available()]
    if unknown:
        raise ValueError(f"unknown exercise id(s): {' '.join(unknown)}; choose from {' '.join(catalog.available())}")
    return [i for i in catalog.available() if i in named] or catalog.available()


COULD_NOT_RUN = "The autograder could not run on this submission. Please tell your instructor."


def fallback_results(ids: list[str]) -> str:
    """run_autograder's results.json until the runner writes one: each check of `ids` with 0."""
    import json

    from graders.runner.points import read_checks

    tests = [{"name": f"{i}: {c.name}", "tags": [i], "score": 0, "max_score": c.points, "status": "failed",
              "output": COULD_NOT_RUN, "visibility": "visible"}
             for i in ids for c in read_checks(catalog.grader_file(i))]
    return json.dumps({"score": 0, "output": COULD_NOT_RUN, "tests": tests}, separators=(",", ":"))


def build_autograder(out: Path, root: Path = ROOT, minutes: float = DEFAULT_MINUTES, ids: list[str] | None = None,
                     after_due=DEFAULT_AFTER_DUE, seed_per_submission: bool = False) -> Path:
    """`ids`: the assignment's exercises (default all); `after_due`: exercises (`ex7`) or checks
    (`ex7:name`) shown to students after the due date; `seed_per_submission`: each submission's
    seed drawn from a hash of its modules and a secret setup.sh makes, instead of one per image."""
    ids = ids or catalog.available()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    budget = grading_budget(minutes)
    hidden = "".join(f" {spec}" for spec in after_due if spec.partition(":")[0] in ids)
    run = (RUN_AUTOGRADER.replace("@BUDGET@", str(budget)).replace("@MINUTES@", f"{minutes:g}")
           .replace("@IDS@", " ".join(ids)).replace("@AFTER_DUE@", f" --after-due{hidden}" if hidden else "")
           .replace("@HARD@", str(budget + HARD_STOP_AFTER))
           .replace("@SEED_PER_SUBMISSION@", "1" if seed_per_submission else "0")
           .replace("@FALLBACK@", fallback_results(ids)))
    setup = SETUP_SH.replace("@IDS@", " ".join(ids)).replace("@SEED_PER_SUBMISSION@", "1" if seed_per_submission else "0")
    skip = set(JUNK)
    with zipfile.ZipFile(out, "w") as zf:
        _add(zf, setup.encode(), "setup.sh", executable=True)
        _add(zf, run.encode(), "run_autograder", executable=True)
        _add(zf, requirements(root).encode(), "requirements.txt")
        _add(zf, root / "pyproject.toml", "pyproject.toml")
        for top in ("graders", "reference"):
            for path in sorted((root / top).rglob("*")):
                rel = path.relative_to(root)
                if path.is_file() and not any(part in skip or part.endswith(".pyc") for part in rel.parts):
                    _add(zf, path, rel.as_posix())
    return out


# ---------------------------------------------------------------- command line

def check_after_due(ids: list[str], specs) -> list[str]:
    """--after-due's items (`ID` or `ID:CHECK`), each checked to name an exercise of `ids` or one
    of its checks (ValueError otherwise), as the runner will read them."""
    from graders.runner.points import after_due

    items = [part for item in specs for part in item.replace(",", " ").split()]
    after_due(ids, items)
    return items


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m graders.course.bundle", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    rel = sub.add_parser("release", help="write the students' copy")
    rel.add_argument("--out", default=str(ROOT / "dist" / "student"))
    rel.add_argument("--self-study", action="store_true",
                     help="the full checks, with the graders' own expected-value code (default: a course's public checks)")
    rel.add_argument("--public-seed", type=int, default=PUBLIC_SEED,
                     help=f"the seed the course copy's checks grade with (default: {PUBLIC_SEED})")
    ag = sub.add_parser("autograder", help="write the Gradescope autograder zip")
    ag.add_argument("--out", default=str(ROOT / "dist" / "autograder.zip"))
    ag.add_argument("--minutes", type=float, default=DEFAULT_MINUTES,
                    help="the assignment's autograder timeout on Gradescope (default: 10)")
    ag.add_argument("--ex", nargs="*", default=None, metavar="ID",
                    help="the assignment's exercises (default: all), e.g. --ex \"ex1 ex2 quiz\"")
    ag.add_argument("--after-due", nargs="*", default=None, metavar="ID[:CHECK]",
                    help="exercises or single checks whose results students see only after the due date "
                         f"(default: {' '.join(DEFAULT_AFTER_DUE)}; 'none': every result shown at once)")
    ag.add_argument("--seed-per-submission", action="store_true",
                    help="draw each submission's seed from a hash of its modules and a secret made by setup.sh "
                         "(default: one seed per image, drawn by setup.sh)")
    loc = sub.add_parser("locate", help="print the folder holding a submission's modules")
    loc.add_argument("folder")
    seed = sub.add_parser("seed", help="print a submission's seed (run_autograder, --seed-per-submission)")
    seed.add_argument("folder")
    seed.add_argument("ids", nargs="*")
    args = parser.parse_args(argv)

    if args.what == "release":
        out = build_release(Path(args.out), self_study=args.self_study, public_seed=args.public_seed)
        if args.self_study:
            print(f"wrote {out}/ (self-study: stubs, the full graders without the quiz key, Makefile, pyproject.toml, "
                  "README.md)")
        else:
            print(f"wrote {out}/ (a course's copy: stubs, public checks with their expected values recorded on seed "
                  f"{args.public_seed}, no quiz key or explanations, Makefile, pyproject.toml, README.md)")
    elif args.what == "autograder":
        try:
            ids = parse_ids(args.ex)
            wanted = DEFAULT_AFTER_DUE if args.after_due is None else [a for a in args.after_due if a.strip() != "none"]
            after_due = check_after_due(ids, [a for a in wanted if a.partition(":")[0] in ids or args.after_due])
        except ValueError as exc:
            parser.error(str(exc))
        try:
            limits = budget_limits(ids, grading_budget(args.minutes))
        except ValueError:
            parser.error(f"--minutes {args.minutes:g} is too small to grade {' '.join(ids)}")
        out = build_autograder(Path(args.out), minutes=args.minutes, ids=ids, after_due=after_due,
                               seed_per_submission=args.seed_per_submission)
        shares = ", ".join(f"{i} {s:.0f} s" for i, s in limits.items())
        print(f"wrote {out} ({grading_budget(args.minutes)} s of grading: {shares}); "
              f"results after the due date: {' '.join(after_due) or 'none'}; "
              f"seed: {'one per submission' if args.seed_per_submission else 'one per image'}. "
              "Upload it on Gradescope's 'Configure Autograder' page")
    elif args.what == "locate":
        found = find_solutions(Path(args.folder))
        if found is not None:
            print(found)
    elif args.what == "seed":
        secret = catalog.submission_secret_file().read_bytes()
        print(submission_seed(Path(args.folder), parse_ids(args.ids), secret))
    return 0


if __name__ == "__main__":
    sys.exit(main())
