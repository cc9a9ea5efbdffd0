"""Running the grading command the way a learner or an instructor does, and reading its JSON."""

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
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
    # A wrong solution graded only for the checks it declares (Corpora): what the other checks
    # would say is unknown, so only `lost(..., declared=True)` may be read.
    only: tuple[str, ...] = ()
    name: str = ""

    def _whole(self, reads=None) -> None:
        if self.only and (reads is None or not set(reads) <= set(self.only)):
            raise AssertionError(
                f"{self.name} was graded only for {', '.join(self.only)} (the checks it declares and those "
                "tests read of it, tests/grading.py: graded_for): a test that reads more of it reads "
                "`run.lost(ex_id, among=CHECKS)`, CHECKS spelled out in the test's file, or it is graded whole")

    def exercise(self, ex_id: str) -> dict:
        self._whole()
        return self.results["extra_data"]["exercises"][ex_id]

    def check(self, ex_id: str, name: str) -> dict:
        self._whole()
        for test in self.results["tests"]:
            if test["name"] == f"{ex_id}: {name}":
                return test
        raise KeyError(f"no check {name!r} in {ex_id}")

    def lost(self, ex_id: str, declared: bool = False, among=None) -> dict[str, str]:
        """check name -> message, for every check of ex_id that did not get its points (an
        exercise that could not be graded loses every check, with its reason). `declared`: of
        the checks the run was graded for, all a run graded only for them can say. `among`: of
        those checks only, which the run must have been graded for."""
        if not declared:
            self._whole(among)
        ex = self.results["extra_data"]["exercises"][ex_id]
        return {name: check["message"] or ex["reason"] for name, check in ex["checks"].items()
                if check["outcome"] != "passed" and (not self.only or name in self.only)
                and (among is None or name in among)}


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


def grade_with_cache(cache_dir: Path, ids, *extra: str, solutions: Path = ROOT / "reference") -> Run:
    """Grade with this folder holding the compilation cache (jax/) and the graders' own stored
    figures (expected/, graders/kit/figure_store.py): the first run computes everything, the next reads."""
    folders = {"JAX_COMPILATION_CACHE_DIR": str(Path(cache_dir) / "jax"),
               "GRADERS_EXPECTED_DIR": str(Path(cache_dir) / "expected")}
    old = {name: os.environ.get(name) for name in folders}
    os.environ.update(folders)  # the background corpora took their environment when the session began
    try:
        return grade(solutions, ids, *extra)
    finally:
        for name, value in old.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


# Exercises whose report carries compiled-program figures (temp memory, FLOPs, collectives).
MEASURING = [ex for ex in ("ex2", "ex3", "ex6", "ex7") if ex in catalog.available()]


def drawing_exercises() -> list[str]:
    """The graders that draw their configuration from the grading seed: a check of theirs takes `seed`."""
    import ast

    def draws(ex_id: str) -> bool:
        tree = ast.parse(catalog.grader_file(ex_id).read_text())
        return any(isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
                   and any(arg.arg == "seed" for arg in node.args.args) for node in tree.body)
    return [e for e in catalog.available() if draws(e)]


def depths(seed: int) -> tuple[int, ...]:
    """The depths the seed draws: ex2's L (of its memory curve, and of its best_group_size pair)
    and ex6's number of layers."""
    from graders.exercises.ex2_sqrt_checkpointing import checks as ex2
    from graders.exercises.ex6_nnx_block_remat import checks as ex6
    return ex2.memory_config(seed)[0], ex2.pair_configs(seed)[0][0], ex6.config(seed).layers


def far_draw_seed() -> int:
    """The first seed after the tests' own that draws each depth at the other end of its range
    from TEST_SEED's draw (simply the next seed may draw the very same configuration)."""
    import itertools

    from graders.exercises.ex2_sqrt_checkpointing import checks as ex2
    from graders.exercises.ex6_nnx_block_remat import checks as ex6
    ranges = (ex2.MEMORY_LS, sorted(ex2.PAIR_SHAPES), sorted({c.layers for c in ex6.CONFIGS}))
    far = tuple(max(r, key=lambda depth: abs(depth - d)) for r, d in zip(ranges, depths(TEST_SEED)))
    return next(s for s in itertools.count(TEST_SEED + 1) if depths(s) == far)


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


# How many of an exercise's right solutions `make test` grades; `make test-course` grades them all.
# Each is a whole grading of 1-3 s of CPU, and tests/right holds some 360: all of them would be 40%
# of what `make test` costs (graders/PERFORMANCE.md), which issue 32 wants under 10 minutes on 2 CPUs.
RIGHT_SAMPLE = 2
# How many of an exercise's `technique: none` wrong solutions `make test` grades whole, for the
# tests that read their total and their numeric checks; it grades the others, as every wrong
# solution, for the checks they declare. `make test-course` grades every one whole.
TECHNIQUE_FREE_SAMPLE = 2


def _sample(cases: list[str], size: int) -> list[str]:
    """`size` of `cases`, the same on every run and machine (picked by a hash of their names, so
    neither the oldest nor the newest)."""
    import hashlib

    return sorted(sorted(cases, key=lambda case: hashlib.sha256(case.encode()).hexdigest())[:size])


def sampled_right_cases(ex_id: str) -> list[str]:
    """The right solutions of ex_id that `make test` grades."""
    return _sample(corpus_cases(ex_id, RIGHT), RIGHT_SAMPLE)


def sampled_technique_free_cases(ex_id: str) -> list[str]:
    """The `technique: none` wrong solutions of ex_id that `make test` grades whole."""
    return _sample(technique_free_cases(ex_id), TECHNIQUE_FREE_SAMPLE)


def technique_free_params(ex_id: str) -> list:
    """ex_id's `technique: none` wrong solutions as a test's parameters: the sampled ones read by
    `make test` (graded whole there), the others by `make test-course` only."""
    import pytest

    sampled = sampled_technique_free_cases(ex_id)
    return [pytest.param(case, id=case, marks=() if case in sampled else pytest.mark.course)
            for case in technique_free_cases(ex_id)]


def selected_cases(ex_id: str, folder: Path, full: bool) -> list[str]:
    """The cases of <folder>/<ex_id>/ a test session grades: every one in a full session (the
    course tests), else every wrong solution and the sampled right ones."""
    return corpus_cases(ex_id, folder) if full or folder != RIGHT else sampled_right_cases(ex_id)


def _literal(node, names: dict):
    """The value of an expression a test file spells out: a literal, a module-level name bound to
    one, or a union of such sets; None for anything else."""
    import ast

    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # a union of sets
        left, right = _literal(node.left, names), _literal(node.right, names)
        return left | right if isinstance(left, set) and isinstance(right, set) else None
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        return None


def _reads_of(function, names: dict) -> set[str] | None:
    """The checks a test function reads of the runs it takes from the corpora: those every read
    names (`run.lost(ex_id, among=CHECKS)`), or None where a read takes the run whole (`lost`
    without `among`, `exercise`, `check`)."""
    import ast

    reads: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("lost", "exercise", "check"):
            among = next((k.value for k in node.keywords if k.arg == "among"), None)
            checks = _literal(among, names) if among is not None else None
            if node.func.attr != "lost" or not isinstance(checks, (set, frozenset, tuple, list)):
                return None
            reads |= set(checks)
    return reads


@functools.cache
def _test_reads() -> tuple[set[str], dict[str, set[str]]]:
    """What the tests outside tests/test_wrong_solutions.py read of the wrong solutions they name
    (any string constant of theirs that is a solution's name): (the names a test reads whole,
    {name: the checks tests read of it}) -- a test function whose every read is
    `run.lost(ex_id, among=CHECKS)` reads those checks of the names in it; anything else in a file
    reads whole."""
    import ast

    whole: set[str] = set()
    among: dict[str, set[str]] = {}
    for path in (ROOT / "tests").glob("test_*.py"):
        if path.name == "test_wrong_solutions.py":
            continue
        tree = ast.parse(path.read_text())
        names = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                names[node.targets[0].id] = _literal(node.value, names)
        in_functions = set()
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef):
                continue
            reads = _reads_of(node, names)
            for const in ast.walk(node):
                if isinstance(const, ast.Constant) and isinstance(const.value, str):
                    in_functions.add(id(const))
                    if reads is None:
                        whole.add(const.value)
                    else:
                        among.setdefault(const.value, set()).update(reads)
        whole |= {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
                  and isinstance(node.value, str) and id(node) not in in_functions}
    return whole, among


def graded_whole(ex_id: str) -> set[str]:
    """The wrong solutions of ex_id that the corpora grade whole outside the course tests: the
    sampled `technique: none` ones (their total is read), those declaring `graded whole:`
    (declares_graded_whole) and those a test reads whole (_test_reads;
    tests/test_wrong_solutions.py reads only the checks each declares). Every other one is graded
    for its declared checks (graded_for)."""
    whole, _ = _test_reads()
    return ({case for case in corpus_cases(ex_id) if case in whole or declares_graded_whole(ex_id, case)}
            | set(sampled_technique_free_cases(ex_id)))


def graded_for(ex_id: str) -> dict[str, tuple[str, ...]]:
    """The checks the corpora grade each wrong solution of ex_id for outside the course tests: those
    it declares and those tests read of it (_test_reads); () for a whole grading (graded_whole)."""
    whole, (_, among) = graded_whole(ex_id), _test_reads()
    return {case: () if case in whole else tuple(dict.fromkeys(
                [*(check for check, _ in expectations(ex_id, case)), *sorted(among.get(case, ()))]))
            for case in corpus_cases(ex_id)}


def _grade_case(ex_id: str, corpus: Path, case: str, options, launcher, only=()) -> Run:
    """One solution of <corpus>/<ex_id>/, graded in a folder of its own through the same grading
    code as the command, from `launcher`'s fork server; with `only`, only those checks are run."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(corpus / ex_id / f"{case}.py", Path(tmp) / f"{catalog.module_name(ex_id)}.py")
        start = time.monotonic()
        result = grading.grade_exercise(ex_id, Path(tmp), options, launcher, only=list(only) or None)
        text = report.format_report([result], Path(tmp), TEST_SEED, verbose=True)
        results = report.results_json([result], text, time.monotonic() - start, TEST_SEED)
        return Run(0 if result.status == "passed" else 1, text, "", results, tuple(only),
                   f"{corpus.name}/{ex_id}/{case}")


def _busy_seconds() -> float:
    """CPU-seconds the machine has spent busy since boot (Linux: /proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


IDLE_WINDOW = 0.5  # seconds over which the machine's load is read before a grading is started


def _a_cpu_is_idle() -> bool:
    """Whether, over the last IDLE_WINDOW, at least one CPU was idle about half the time."""
    before = _busy_seconds()
    time.sleep(IDLE_WINDOW)
    # The CPUs this process may run on: a container pinned to 2 of a host's CPUs counts 2.
    return (_busy_seconds() - before) / IDLE_WINDOW < len(os.sched_getaffinity(0)) - 0.5


class Corpora:
    """The corpora a test session reads, graded case by case while the tests run: by a
    background thread, by a second one while a CPU is idle (a test waiting for a timeout or a
    process), and by the test that needs a corpus, which grades its cases not yet started itself,
    beside the background, then waits for those under way.

    So about as many gradings run as there are CPUs. Grading whole corpora two at a time in the
    background beside the tests (as before) kept more processes than CPUs busy and cost 6% more
    CPU for no shorter wall time; graders/PERFORMANCE.md has the figures. A corpus is (ex_id,
    folder, full): full for the course tests, which grade every case whole (selected_cases,
    _only). All of them are graded from one fork server, which imports what every exercise uses
    (as a learner's kept server does): started with the first case, ended with the session. One
    server per corpus cost about 1 s of CPU each, some 20 s a session."""

    def __init__(self, base_env: dict | None = None):
        self.options = grading.Options(seed=TEST_SEED, jobs=1)
        self.env = dict(os.environ if base_env is None else base_env)
        self._cond = threading.Condition()
        self._order: list[tuple[str, Path, bool]] = []
        self._pending: dict = {}  # corpus -> cases not started, in order
        self._running: dict = {}  # corpus -> cases under way
        self._results: dict = {}  # corpus -> {case: Run}
        self._errors: dict = {}  # corpus -> the exception a grading raised
        self._server = None  # the fork server every case is graded from
        self._server_starting = threading.Lock()
        self._stopped = False
        self._threads: list[threading.Thread] = []
        self._plan: dict[str, dict[str, tuple[str, ...]]] = {}  # ex_id -> graded_for(ex_id)

    def want(self, ex_id: str, folder: Path = CORPUS, full: bool = False) -> None:
        key = (ex_id, folder, full)
        with self._cond:
            if key not in self._pending:
                self._order.append(key)
                self._pending[key] = selected_cases(ex_id, folder, full)
                self._running[key], self._results[key] = 0, {}
                self._cond.notify_all()

    def start(self) -> None:
        self._threads = [threading.Thread(target=self._background, name="corpus", daemon=True),
                         threading.Thread(target=self._background, args=(True,), name="corpus-idle", daemon=True)]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join()
        if self._server is not None:
            self._server.close()
            self._server = None

    def get(self, ex_id: str, folder: Path = CORPUS, full: bool = False) -> dict[str, Run]:
        key = (ex_id, folder, full)
        self.want(*key)
        while self._work(key):
            pass
        with self._cond:
            self._cond.wait_for(lambda: self._running[key] == 0)
            if key in self._errors:
                raise self._errors[key]
            results = self._results[key]
        return {case: results[case] for case in selected_cases(*key)}

    def _background(self, only_when_idle: bool = False) -> None:
        """Grade the cases not yet started, in order. The second background thread grades one
        only while the machine leaves a CPU idle (a test waiting for a timeout or a process)."""
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stopped or any(self._pending[k] for k in self._order))
                if self._stopped:
                    return
            if only_when_idle and not _a_cpu_is_idle():
                continue
            self._work(None)

    def _work(self, key) -> bool:
        """Grade one case not yet started (of `key`, else of the first corpus asked for that has
        one); False when there was none."""
        with self._cond:
            if key is None:
                key = next((k for k in self._order if self._pending[k]), None)
            if key is None or not self._pending[key]:
                return False
            case = self._pending[key].pop(0)
            self._running[key] += 1
        try:
            run = _grade_case(key[0], key[1], case, self.options, self._launcher(), self._only(key, case))
        except BaseException as exc:  # the test that reads the corpus reports it
            with self._cond:
                self._errors.setdefault(key, exc)
                self._running[key] -= 1
                self._cond.notify_all()
            return True
        with self._cond:
            self._results[key][case] = run
            self._running[key] -= 1
            self._cond.notify_all()
        return True

    def _only(self, key, case) -> tuple[str, ...]:
        """The checks a wrong solution is graded for outside the course tests (graded_for), else ()
        for a whole grading."""
        ex_id, folder, full = key
        if folder != CORPUS or full:
            return ()
        with self._cond:
            if ex_id not in self._plan:
                self._plan[ex_id] = graded_for(ex_id)
        return self._plan[ex_id][case]

    def _launcher(self):
        with self._server_starting:
            if self._server is None:
                self._server = launch.launcher(catalog.available(), self.options.env(self.env))
            return self._server


def _doc_lines(ex_id: str, case: str) -> list[str]:
    import ast

    return (ast.get_docstring(ast.parse((CORPUS / ex_id / f"{case}.py").read_text())) or "").splitlines()


def technique_free(ex_id: str, case: str) -> bool:
    """Whether a wrong solution declares `technique: none`: every number right, the technique not
    doing the work. The README's grading policy says such a solution scores at most half."""
    return any(line.startswith("technique: none") for line in _doc_lines(ex_id, case))


def declares_graded_whole(ex_id: str, case: str) -> bool:
    """Whether a wrong solution declares `graded whole: <why>`: it loses its declared checks only
    after the calls earlier checks make of it (its own state, e.g. a model that changes after its
    first call at a shape), so `make test` grades it whole too."""
    return any(line.startswith("graded whole:") for line in _doc_lines(ex_id, case))


def expectations(ex_id: str, case: str) -> list[tuple[str, str]]:
    """The (check, words) pairs a wrong solution declares in its docstring as
    `loses: <check>: <words its message must contain>`."""
    return [tuple(part.strip() for part in line.removeprefix("loses:").split(":", 1))
            for line in _doc_lines(ex_id, case) if line.startswith("loses:")]


def grader_module(ex_id: str, probes: bool = False):
    """The module of ex_id's checks (or of its probes), imported by the path catalog.py gives it,
    so that a test reads a grader's helpers wherever its file lives."""
    import importlib

    path = (catalog.probes_file if probes else catalog.grader_file)(ex_id)
    return importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
