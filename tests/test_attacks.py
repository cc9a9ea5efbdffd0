"""Attacks on --sandbox: each submission in tests/attacks/ tries to get marks it has not earned,
or to read, write or outlive what it must not (issue 13). Under --sandbox each must score no more
than its honest content, and leave the run as it found it:
  * the printed total, results.json's score and the sum of its tests agree, and still agree
    seconds after the run has ended (a daemon may try to rewrite the file);
  * no exercise is worth more than its grader declares;
  * no file of the package changed, and nothing was left where a later run would read it;
  * no process of the run is alive (within SETTLE seconds of its end).
Without --sandbox the same attack is shown to be real where that is cheap: it scores more than
its honest content (tests/attacks/README.md says how an attack declares that).

Every attack is graded on EXERCISES at once, one run of the command per attack, after the
reference solutions have been graded once with the compilation cache (as an autograder's setup
does). To try the attacks on another exercise, add it to EXERCISES (and, if its stub is not a
fair honest module, tests/attacks/honest_<ex>.py). An attack that forges one exercise's probe
replies names that exercise (`exercises: EX...`) and is graded on it alone; the honest modules are
graded on every exercise an attack is.
"""

import ast
import hashlib
import json
import os
import re
import shutil
import site
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from grading import ROOT, alive_with_seed, declared
from graders import catalog
from graders.child import sandbox

pytestmark = [pytest.mark.skipif(bool(sandbox.available()), reason=sandbox.available() or ""),
              # the first test waits for every grading of the module (a few minutes on 2 busy CPUs)
              pytest.mark.timeout(1800),
              # About 50 runs of the command, two minutes of both CPUs: a course test (make
              # test-course), with the Gradescope autograder and batch that --sandbox serves. What
              # decides a verdict under --sandbox (tests/test_forged_evidence.py) and what the
              # sandbox promises a learner's run (tests/test_sandbox.py) stay in make test.
              pytest.mark.course]

# The exercises every attack is tried on: one line per exercise whose checks run in a judge.
EXERCISES = ["ex1", "ex4", "quiz"]

ATTACKS_DIR = Path(__file__).resolve().parent / "attacks"
ATTACKS = sorted(p.stem for p in ATTACKS_DIR.glob("*.py") if p.stem != "kit" and not p.stem.startswith("honest_"))
MARKER = "zz_attack_marker"  # the name persist.py leaves files under
SEED_BASE = 613_000  # each run its own seed, by which its processes are found (tests/test_sandbox.py)
LATER = 4.0  # seconds after a run that its results.json is read again
# Seconds a sandboxed run's processes have to be gone after the command returns. The process that
# holds a worker's namespace ends when the judge does, by a signal the kernel sends it on the
# judge's death (PR_SET_PDEATHSIG, graders/child/sandbox.py): when the runner had to kill a stuck judge,
# that can land a moment after the command returned (seen once, with the whole suite running).
SETTLE = 5.0


@dataclass
class Outcome:
    returncode: int
    printed_total: int | None
    printed: dict  # ex -> points, as the report's table prints them
    results: dict
    raw: bytes  # results.json as the run left it
    ended: float  # time.monotonic() when the command returned
    alive: list[int]
    changed: list[str]  # files of the package that differ from before the run
    scratch: Path | None = None
    later: bytes = b""
    notes: dict = field(default_factory=dict)


def meta(attack: str) -> dict[str, list[str]]:
    doc = ast.get_docstring(ast.parse((ATTACKS_DIR / f"{attack}.py").read_text())) or ""
    out = {}
    for line in doc.splitlines():
        key, sep, value = line.partition(":")
        if sep and key in ("beats-without-sandbox", "plain", "links", "args", "exercises"):
            out[key] = value.split()
    return out


def targets(attack: str | None) -> list[str]:
    """The exercises an attack is graded on (`exercises: EX...`, else EXERCISES); for the honest
    modules (None), every exercise any attack is graded on."""
    if attack is None:
        return list(dict.fromkeys([*EXERCISES, *(ex for a in ATTACKS for ex in targets(a))]))
    return meta(attack).get("exercises") or EXERCISES


def links(attack: str) -> dict[str, str]:
    """ex -> the file of the package its module is a symbolic link to (`links: ex=path ...`)."""
    return dict(item.split("=", 1) for item in meta(attack).get("links", []))


def honest(ex_id: str) -> str:
    """The honest-but-wrong module of ex_id: tests/attacks/honest_<ex>.py, else the stub."""
    own = ATTACKS_DIR / f"honest_{ex_id}.py"
    return (own if own.exists() else ROOT / "exercises" / f"{catalog.module_name(ex_id)}.py").read_text()


def submission(attack: str | None, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    checks = {catalog.module_name(ex): list(declared(ex)) for ex in targets(attack)}
    kit = (ATTACKS_DIR / "kit.py").read_text().replace("{checks!r}", repr(checks))
    for ex in targets(attack):
        target = into / f"{catalog.module_name(ex)}.py"
        if attack is None:
            target.write_text(honest(ex))
        elif ex in links(attack):
            target.symlink_to(ROOT / links(attack)[ex])
        else:
            text = (ATTACKS_DIR / f"{attack}.py").read_text()
            text = text.replace("# @HONEST@", honest(ex)) if "# @HONEST@" in text else text + "\n" + honest(ex)
            target.write_text(kit + text)
    return into


def package_files(root: Path) -> dict[str, str]:
    """Every file of the package (tracked or not) -> its hash, skipping what runs create."""
    skip = {".git", ".cache", ".venv", "__pycache__", ".pytest_cache"}
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in skip]
        for name in filenames:
            path = Path(dirpath) / name
            try:
                out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError:
                out[str(path.relative_to(root))] = "unreadable"
    return out


def describe(pid: int) -> str:
    """A process by its command line, user and parent: which of the run's processes it was."""
    try:
        status = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if ":\t" in line)
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:160]
        return f"{pid}: {command} (uid {status.get('Uid', '?').split()[0]}, parent {status.get('PPid')}, {status.get('State')})"
    except OSError:
        return f"{pid}: gone"


def printed(report: str) -> tuple[int | None, dict]:
    """The total and each exercise's points from the report's table (the first one printed
    after the live rows: the line under `id exercise status points time`)."""
    lines = report.splitlines()
    start = next((i for i, line in enumerate(lines) if re.match(r"\s+id\s+exercise\s+status", line)), None)
    if start is None:
        return None, {}
    points, total = {}, None
    for line in lines[start + 1:]:
        found = re.match(r"\s+total\s+(\d+)/(\d+)\s*$", line)
        if found:
            total = int(found.group(1))
            break
        row = re.match(r"\s+(\S+)\s.*\s(\d+)/(\d+)\s+[\d.]+s\s*$", line)
        if row:
            points[row.group(1)] = int(row.group(2))
    return total, points


def by_tests(results: dict, exercises=None) -> dict[str, int]:
    """Each exercise's points as Gradescope reads them: the sum of its tests' scores."""
    out = {ex: 0 for ex in exercises or EXERCISES}
    for test in results.get("tests", []):
        for ex in test.get("tags", []):
            out[ex] = out.get(ex, 0) + test["score"]
    return out


def run(attack: str | None, seed: int, sandboxed: bool, work: Path) -> Outcome:
    folder = submission(attack, work / "submission")
    out = work / "results.json"
    cwd = ROOT
    scratch = None
    if not sandboxed:
        # Without the sandbox an attack may rewrite the package: it does so in a copy.
        scratch = work / "package"
        for top in ("graders", "reference"):
            shutil.copytree(ROOT / top, scratch / top, ignore=shutil.ignore_patterns("__pycache__"))
        cwd = scratch
    before = package_files(ROOT)
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "graders", *targets(attack), "--solutions", str(folder), "--json", str(out),
         "--seed", str(seed), "--jobs", "1", "--timeout", "60", *(meta(attack).get("args", []) if attack else []),
         *(("--sandbox",) if sandboxed else ("--no-cache",))],
        cwd=cwd, capture_output=True, text=True, timeout=300)
    ended = time.monotonic()
    alive = alive_with_seed(seed)
    while sandboxed and alive and time.monotonic() < ended + SETTLE:
        time.sleep(0.1)
        alive = alive_with_seed(seed)
    described = [describe(pid) for pid in alive]  # before they are killed: what outlived the run
    for pid in alive if sandboxed else ():  # recorded, and not left running (without the
        try:                                 # sandbox a daemon must live on, to show it can)
            os.kill(pid, 9)
        except OSError:
            pass
    after = package_files(ROOT)
    raw, results = read_results(out)
    total, points = printed(proc.stdout)
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    outcome = Outcome(proc.returncode, total, points, results, raw, ended, alive, changed, scratch)
    outcome.notes["stdout"], outcome.notes["stderr"] = proc.stdout, proc.stderr
    outcome.notes["seconds"] = ended - start
    outcome.notes["alive"] = described
    return outcome


def read_results(path: Path) -> tuple[bytes, dict]:
    """results.json as it is now, and parsed. Without the sandbox a daemon of the attack may be
    rewriting it at this moment (open, truncate, write): a half-written file is read again."""
    raw = b""
    for _ in range(50):
        raw = path.read_bytes() if path.exists() else b""
        try:
            return raw, json.loads(raw) if raw else {}
        except ValueError:
            time.sleep(0.1)
    return raw, {}


def leftovers() -> list[str]:
    """Files persist.py tried to leave behind."""
    places = [ROOT, ROOT / "graders", ROOT / ".cache" / "jax", Path("/dev/shm"), *map(Path, site.getsitepackages())]
    return [str(p / name) for p in places for name in (MARKER, MARKER + ".py", MARKER + ".pth") if (p / name).exists()]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Every attack under --sandbox, and without it where it is safe; the honest modules both ways."""
    base = tmp_path_factory.mktemp("attacks")
    # As an autograder's setup does: the reference solutions graded once, with the compilation
    # cache, before any submission (so the cache holds their programs and the checks').
    subprocess.run([sys.executable, "-m", "graders", *EXERCISES, "--solutions", str(ROOT / "reference"),
                    "--seed", str(SEED_BASE - 1), "--jobs", "1"], cwd=ROOT, capture_output=True, timeout=300)
    jobs = [(None, True), (None, False)]
    jobs += [(a, True) for a in ATTACKS]
    # Without the sandbox only what shows an attack is real, and never what is unsafe there.
    jobs += [(a, False) for a in ATTACKS if "unsafe" not in meta(a).get("plain", [])
             and (meta(a).get("beats-without-sandbox") or meta(a).get("plain") or a == "snoop")]
    # The attacks that run into their --timeout first, so that none of them is the last to end.
    jobs.sort(key=lambda job: not (job[0] and "--timeout" in meta(job[0]).get("args", [])))

    def one(index_job):
        index, (attack, sandboxed) = index_job
        work = base / f"{attack or 'honest'}-{'sandbox' if sandboxed else 'plain'}"
        return (attack, sandboxed), run(attack, SEED_BASE + index, sandboxed, work)

    with ThreadPoolExecutor(max_workers=2) as pool:
        done = dict(pool.map(one, enumerate(jobs)))
    wait = LATER - (time.monotonic() - max(o.ended for o in done.values()))
    time.sleep(max(0.0, wait))
    for (attack, sandboxed), outcome in done.items():
        path = base / f"{attack or 'honest'}-{'sandbox' if sandboxed else 'plain'}" / "results.json"
        outcome.later = path.read_bytes() if path.exists() else b""
    return done


def _honest(graded, sandboxed: bool) -> dict[str, int]:
    return by_tests(graded[(None, sandboxed)].results, targets(None))


def test_the_honest_modules_are_graded_alike_with_and_without_the_sandbox(graded):
    boxed, plain = graded[(None, True)], graded[(None, False)]
    assert by_tests(boxed.results, targets(None)) == by_tests(plain.results, targets(None))
    assert boxed.printed_total == boxed.results["score"] == sum(by_tests(boxed.results, targets(None)).values())


@pytest.mark.parametrize("attack", ATTACKS)
def test_under_the_sandbox_an_attack_earns_no_more_than_its_honest_content(graded, attack):
    outcome, honest_points = graded[(attack, True)], _honest(graded, True)
    assert outcome.raw, f"no results.json: {outcome.notes['stderr'][-2000:]}"
    points = by_tests(outcome.results, targets(attack))
    for ex in targets(attack):
        assert points[ex] <= honest_points[ex], (ex, points[ex], honest_points[ex])
        extra = outcome.results["extra_data"]["exercises"][ex]
        assert extra["score"] <= honest_points[ex], (ex, extra["score"], honest_points[ex], extra["reason"])
        assert outcome.printed.get(ex, 0) <= honest_points[ex], (ex, outcome.printed, honest_points)


@pytest.mark.parametrize("attack", ATTACKS)
def test_under_the_sandbox_the_printed_total_and_results_json_agree_even_later(graded, attack):
    outcome = graded[(attack, True)]
    total = sum(by_tests(outcome.results, targets(attack)).values())
    assert outcome.printed_total == outcome.results["score"] == total, (
        outcome.printed_total, outcome.results["score"], total)
    assert outcome.later == outcome.raw, "results.json changed after the run had ended"


@pytest.mark.parametrize("attack", ATTACKS)
def test_under_the_sandbox_no_exercise_is_worth_more_than_its_grader_declares(graded, attack):
    results = graded[(attack, True)].results
    for ex in targets(attack):
        most = sum(declared(ex).values())
        assert results["extra_data"]["exercises"][ex]["max_score"] == most
        assert sum(t["max_score"] for t in results["tests"] if ex in t["tags"]) == most


@pytest.mark.parametrize("attack", ATTACKS)
def test_under_the_sandbox_the_package_is_untouched_and_nothing_is_left_behind(graded, attack):
    outcome = graded[(attack, True)]
    assert outcome.changed == []
    assert leftovers() == []


@pytest.mark.parametrize("attack", ATTACKS)
def test_under_the_sandbox_no_process_of_the_run_is_alive_afterwards(graded, attack):
    outcome = graded[(attack, True)]
    assert outcome.alive == [], f"alive after the run: {outcome.notes['alive']}"


# Attacks that raise on purpose (what they found is the exception's message), and what it says.
RAISES_ON_PURPOSE = {"snoop": "RuntimeError: FOUND{"}


@pytest.mark.parametrize("attack", ATTACKS)
def test_under_the_sandbox_an_attack_fails_by_no_error_of_its_own(graded, attack):
    """An attack that raises (a NameError, a probe renamed, a module moved) earns nothing and
    proves nothing: the tests above would hold without it ever reaching the grader."""
    for ex, extra in graded[(attack, True)].results["extra_data"]["exercises"].items():
        said = [extra.get("reason") or "", *((c.get("message") or "") for c in extra.get("checks", {}).values())]
        raised = [s for s in said if "your code raised" in s or re.search(r"could not import \S+: \w+: ", s)]
        assert all(RAISES_ON_PURPOSE.get(attack, "\0") in s for s in raised), (attack, ex, raised[:2])
    if attack.startswith("forge_"):  # probes replaced by assignment: the guard must be what stops it
        for ex in targets(attack):
            assert "your code replaced" in graded[(attack, True)].results["extra_data"]["exercises"][ex]["reason"]


def test_under_the_sandbox_a_snooping_module_finds_nothing(graded):
    reason = graded[("snoop", True)].results["extra_data"]["exercises"]["ex4"]["reason"]
    found = json.loads(reason[reason.index("FOUND") + 5:reason.index("END")])
    # The seed is printed in every report, so it is no secret; the worker merely drops the variable.
    found.pop("seed_in_memory")
    if sandbox.level() == "user":
        found.pop("other_pids")  # visible at that level (never readable: other_environ, other_mem)
    assert found.pop("reference") is False
    assert found == {key: False for key in found}, found


def test_without_the_sandbox_the_snooping_module_does_find_things(graded):
    reason = graded[("snoop", False)].results["extra_data"]["exercises"]["ex4"]["reason"]
    found = json.loads(reason[reason.index("FOUND") + 5:reason.index("END")])
    assert found["other_pids"] and found["other_environ"] and found["grader_file"] and found["reference"]


BEATING = [(a, ex) for a in ATTACKS for ex in meta(a).get("beats-without-sandbox", []) if ex in targets(a)]


@pytest.mark.parametrize(("attack", "ex"), BEATING)
def test_without_the_sandbox_the_attack_is_real(graded, attack, ex):
    """The same submission, graded without --sandbox, scores more than its honest content
    (in the printed report, in results.json as written, or in results.json seconds later)."""
    outcome, honest_points = graded[(attack, False)], _honest(graded, False)
    later = by_tests(json.loads(outcome.later), targets(attack)) if outcome.later else {}
    best = max(outcome.printed.get(ex, 0), by_tests(outcome.results, targets(attack)).get(ex, 0), later.get(ex, 0))
    assert best > honest_points[ex], (attack, ex, best, honest_points[ex])


def test_without_the_sandbox_the_quiz_points_are_rewritten(graded):
    outcome = graded[("quiz_points", False)]
    assert "points(50)" in (outcome.scratch / "graders" / "exercises" / "quiz" / "checks.py").read_text()


def test_under_the_sandbox_too_long_answers_are_graded_and_the_fork_server_lives_on(graded):
    """The quiz's values travel to the fork server in one message: one longer than the server
    read would kill it (and every exercise graded after it) with a misleading reason."""
    quiz = graded[("quiz_big_answers", True)].results["extra_data"]["exercises"]["quiz"]
    assert quiz["status"] == "partial", quiz["reason"]
    assert "written out" in quiz["checks"]["question_1"]["message"]


def test_under_the_sandbox_a_linked_module_does_not_reveal_the_quiz_key(graded):
    """A module that is a symbolic link to a file of the package must not bring that file's
    contents to the learner's code (here the quiz key, shown in the report for the next try)."""
    outcome = graded[("symlink_key", True)]
    salt = json.loads(catalog.quiz_key_file().read_text())["salt"]
    assert salt not in outcome.notes["stdout"] and salt not in outcome.raw.decode()


def test_without_the_sandbox_a_linked_module_does_reveal_the_quiz_key(graded):
    salt = json.loads(catalog.quiz_key_file().read_text())["salt"]
    assert salt in graded[("symlink_key", False)].raw.decode()
