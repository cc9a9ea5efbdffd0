"""Grade a class: `python -m graders.course.batch SUBMISSIONS --out DIR [--jobs N] [--timeout S] [--regrade] [--ex IDS]`

SUBMISSIONS holds one folder or one .zip per student, named by the student's id. For each one
this writes DIR/<student>/results.json (Gradescope's schema) and DIR/<student>/report.txt, then
DIR/gradebook.csv: student, one column per exercise, total, notes (timed out, missing module,
error). Each student is graded by the runner in a process of its own, so code that loops,
crashes or is missing costs that student's points and never stops the batch.

A student whose submission has not changed since the last run (same bytes, same graders, same
exercises, seed and limits) is not graded again; --regrade grades everyone. Progress goes to stderr, one line per
student when stderr is not a terminal, so nothing but the CSV path reaches a pipe on stdout.
"""

import argparse
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from graders import catalog, settings
from graders.child import sandbox
from graders.course.bundle import find_solutions, parse_ids
from graders.runner import grading

DEFAULT_TIMEOUT = 120.0  # seconds per exercise
STAMP = "submission.sha256"  # beside each student's results: what was graded
MAX_UNZIPPED = 50 * 2**20  # bytes a student's zip may unpack to


@dataclass
class Student:
    name: str
    path: Path  # a folder or a .zip


def find_students(submissions: Path) -> list[Student]:
    students = []
    for entry in sorted(submissions.iterdir()):
        if entry.name.startswith((".", "__")):
            continue
        if entry.is_dir():
            students.append(Student(entry.name, entry))
        elif entry.suffix.lower() == ".zip":
            students.append(Student(entry.stem, entry))
    names = [s.name for s in students]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SystemExit(f"both a folder and a zip for: {', '.join(twice)}; keep one per student")
    return students


def fingerprint(student: Student, timeout: float, ids: list[str] | None = None, seed: int | None = None) -> str:
    """Hash of what decides the grade: the submission's bytes, every file of graders/ (checks,
    probes, the key, helpers and data), the exercises graded, the seed and the time limit."""
    ids = ids or catalog.available()
    seed = grading.installation_seed() if seed is None else seed
    h = hashlib.sha256(f"timeout={timeout:g}\nids={' '.join(ids)}\nseed={seed}\n".encode())
    files = [student.path] if student.path.is_file() else sorted(p for p in student.path.rglob("*") if p.is_file())
    for path in files:
        h.update(str(path.relative_to(student.path.parent)).encode() + b"\0" + path.read_bytes() + b"\0")
    # Every file a grading reads: graders/ whole (bytecode aside, which follows its source).
    for path in sorted(catalog.GRADERS_DIR.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            h.update(str(path.relative_to(catalog.GRADERS_DIR)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def unzip(archive: Path, into: Path) -> None:
    """Unpack a student's zip, refusing paths that leave the folder and archives that explode."""
    with zipfile.ZipFile(archive) as zf:
        if sum(info.file_size for info in zf.infolist()) > MAX_UNZIPPED:
            raise ValueError(f"unpacks to more than {MAX_UNZIPPED // 2**20} MB")
        root = into.resolve()
        for info in zf.infolist():
            target = (into / info.filename).resolve()
            if not target.is_relative_to(root):
                raise ValueError(f"holds a path outside its folder: {info.filename}")
        zf.extractall(into)


def _notes(results: dict) -> str:
    notes = []
    for ex_id, ex in results.get("extra_data", {}).get("exercises", {}).items():
        reason = ex.get("reason", "")
        if ex.get("status") == "timed out":
            notes.append(f"{ex_id} timed out")
        elif reason.startswith("missing"):
            notes.append(f"{ex_id} missing module")
        elif ex.get("status") == "not graded":
            notes.append(f"{ex_id} not graded (out of time)")
        elif ex.get("status") == "error":
            notes.append(f"{ex_id} error")
    return "; ".join(notes)


def _failed_results(message: str) -> dict:
    return {"score": 0, "output": message, "tests": [], "extra_data": {"exercises": {}, "batch_error": message}}


# Confined whenever this machine allows it (root on Linux): a student's code then sees neither the
# class folder nor the other students, and leaves nothing running.
SANDBOX = () if sandbox.available() else ("--sandbox",)


def private_caches(into: Path) -> dict[str, str]:
    """Environment variables that give one unconfined student's run a copy of the package's
    compilation cache and stored figures (graders/kit/figure_store.py), made in `into`. Unconfined, a
    student's code runs as the grader does and could write a forged program or figure where the
    next student's grading would read it; with a copy, the next student starts from the caches
    as the reference left them. (Confined, the student's code can write neither.)"""
    env = {}
    for name, default in (("JAX_COMPILATION_CACHE_DIR", catalog.ROOT / ".cache" / "jax"),
                          (settings.EXPECTED_DIR, catalog.ROOT / ".cache" / "expected")):
        source, copy = Path(os.environ.get(name) or default), into / name.lower()
        if source.is_dir():
            shutil.copytree(source, copy, symlinks=True)  # copies: a hard link would be written through
        else:
            copy.mkdir(parents=True)
        env[name] = str(copy)
    return env


def grade_student(student: Student, out: Path, timeout: float, ids: list[str] | None = None,
                  seed: int | None = None) -> dict:
    """Grade one student into out/<student>/ on `ids` (default all) with `seed` (default this
    installation's); returns the results (never raises for their code)."""
    folder = out / student.name
    folder.mkdir(parents=True, exist_ok=True)
    ids = ids or catalog.available()
    with tempfile.TemporaryDirectory(prefix="batch-") as tmp:
        try:
            if student.path.is_file():
                unzip(student.path, Path(tmp) / "unzipped")
                base = Path(tmp) / "unzipped"
            else:
                base = student.path
            # Graded from a copy, so nothing the code writes lands in the class's folder.
            found = find_solutions(base)
            # The report names the folder graded as it is in the submission.
            label = student.path.name + ("" if found is None or found == base else "/" + found.relative_to(base).as_posix())
            work = Path(tmp) / "solutions"
            if found is None:
                work.mkdir()
            else:
                shutil.copytree(found, work, symlinks=True,  # links stay links: stage() skips them
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        except (OSError, ValueError, zipfile.BadZipFile) as exc:
            results = _failed_results(f"could not read the submission {student.path.name}: {exc}")
            (folder / "report.txt").write_text(results["output"] + "\n")
            (folder / "results.json").write_text(json.dumps(results, indent=2))
            return results
        json_path = folder / "results.json"
        json_path.unlink(missing_ok=True)
        # The runner enforces each exercise's limit; this bound only catches a runner that hangs.
        bound = timeout * len(ids) + 120
        env = dict(os.environ) if SANDBOX else dict(os.environ, **private_caches(Path(tmp) / "caches"))
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "graders", *ids, "--solutions", str(work), "--label", label,
                 "--json", str(json_path), "--jobs", "1", "--timeout", f"{timeout:g}",
                 *(("--seed", str(seed)) if seed is not None else ()), *SANDBOX],
                cwd=catalog.ROOT, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                errors="replace", timeout=bound)
            report = proc.stdout.replace(str(work), student.name) + (proc.stderr if proc.returncode > 1 else "")
        except subprocess.TimeoutExpired:
            report = f"grading did not finish within {bound:g} s"
        try:
            results = json.loads(json_path.read_text())
        except (OSError, ValueError):
            results = _failed_results("the grader could not produce results: " + report[-500:])
            json_path.write_text(json.dumps(results, indent=2))
        (folder / "report.txt").write_text(report)
    return results


def write_gradebook(out: Path, rows: dict[str, dict], ids: list[str] | None = None) -> Path:
    ids = ids or catalog.available()
    path = out / "gradebook.csv"
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["student", *ids, "total", "notes"])
        for name in sorted(rows):
            results = rows[name]
            exercises = results.get("extra_data", {}).get("exercises", {})
            scores = [exercises.get(i, {}).get("score", 0) for i in ids]
            notes = results.get("extra_data", {}).get("batch_error") or _notes(results)
            writer.writerow([name, *scores, results.get("score", 0), notes])
    return path


class Progress:
    """students done/total and an estimate of the time left, on stderr only."""

    def __init__(self, total: int, jobs: int):
        self.total, self.jobs, self.done, self.start = total, jobs, 0, time.monotonic()
        self.graded_seconds: list[float] = []
        self.tty = sys.stderr.isatty()
        self.lock = threading.Lock()

    def step(self, name: str, seconds: float | None, note: str) -> None:
        with self.lock:
            self.done += 1
            if seconds is not None:
                self.graded_seconds.append(seconds)
            left = self.total - self.done
            if self.graded_seconds and left:
                mean = sum(self.graded_seconds) / len(self.graded_seconds)
                eta = f", about {_duration(mean * left / self.jobs)} left"
            else:
                eta = ""
            line = f"[{self.done}/{self.total}] {name}: {note}{eta}"
            if self.tty:
                sys.stderr.write("\r\033[K" + line + ("\n" if not left else ""))
            else:
                sys.stderr.write(line + "\n")
            sys.stderr.flush()


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m graders batch", description="Grade a folder of submissions.")
    parser.add_argument("submissions", help="a folder holding one folder or one .zip per student")
    parser.add_argument("--out", required=True, help="where results and gradebook.csv are written")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2),
                        help="students graded at once (default: half the CPUs)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per exercise (default: 120)")
    parser.add_argument("--regrade", action="store_true", help="grade every student again, changed or not")
    parser.add_argument("--ex", nargs="+", default=None, metavar="ID",
                        help="grade only these exercises (an assignment), e.g. --ex ex1 ex2 quiz (default: all)")
    args = parser.parse_args(argv)
    try:
        args.ex = parse_ids(args.ex)
    except ValueError as exc:
        parser.error(str(exc))
    if not Path(args.submissions).is_dir():
        parser.error(f"{args.submissions}: no such folder")
    if args.jobs < 1 or args.timeout <= 0:
        parser.error("--jobs and --timeout must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    submissions, out = Path(args.submissions).resolve(), Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if SANDBOX and sandbox.level() == "user":
        # No new root hides the class's folders from a student's code there: their modes do.
        for folder in (submissions, out):
            os.chmod(folder, 0o700)
    students = find_students(submissions)
    progress = Progress(len(students), args.jobs)
    # One seed for the class, read once, given to every grading and kept in each fingerprint.
    seed = grading.installation_seed()
    rows: dict[str, dict] = {}

    def one(student: Student) -> tuple[str, dict]:
        stamp = out / student.name / STAMP
        digest = fingerprint(student, args.timeout, args.ex, seed)
        if not args.regrade and stamp.is_file() and stamp.read_text().strip() == digest:
            try:
                results = json.loads((out / student.name / "results.json").read_text())
                progress.step(student.name, None, "unchanged, kept")
                return student.name, results
            except (OSError, ValueError):
                pass
        start = time.monotonic()
        results = grade_student(student, out, args.timeout, args.ex, seed)
        stamp.write_text(digest + "\n")
        note = _notes(results) or results.get("extra_data", {}).get("batch_error", "")
        progress.step(student.name, time.monotonic() - start,
                      f"{results.get('score', 0)}/{sum(t.get('max_score', 0) for t in results.get('tests', []))}" + (f" ({note})" if note else ""))
        return student.name, results

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for future in as_completed([pool.submit(one, s) for s in students]):
            name, results = future.result()
            rows[name] = results
    path = write_gradebook(out, rows, args.ex)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
