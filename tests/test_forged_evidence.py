"""Issue 31: under --sandbox the technique points are decided from the learner's program, which the
judge reads and runs itself, never from a description the learner's process wrote.

For each exercise, tests/attacks/described/ holds a technique-free module with every number right
(notech_<ex>.py) and a forge (forge_<ex>.py) that, on import, replaces each of the exercise's
probes that reads the learner's program with one sending what a correct solution's probe sends:
the technique described, computed from the module's own right numbers and a made-up structure.
Two ways to put the forged probe in place:
  * `plain`: the probes module's attribute replaced (what the guard sees: graders/child/guard.py);
  * `code`: the probe function's __code__ swapped, which leaves every name the guard compares
    pointing at the object it did: only the program as evidence stops this one.
Under --sandbox each must score at most half of the exercise's points, and no more than the
technique-free module graded honestly.

An attack on the sandbox the Gradescope autograder and batch use, like tests/test_attacks.py: a
course test (`make test-course`, which CI runs), about 100 s of CPU that `make test` no longer pays.
"""

from pathlib import Path

import pytest

from grading import ROOT, declared, grade
from graders import catalog
from graders.child import sandbox

pytestmark = [pytest.mark.course,
              pytest.mark.skipif(bool(sandbox.available()), reason=sandbox.available() or ""),
              pytest.mark.timeout(900)]

DESCRIBED = Path(__file__).resolve().parent / "attacks" / "described"
# The forges written: forge_<ex>.py describes the technique (the old probes' replies);
# forge_<ex>_program.py sends the program of another function, with the technique's every mark,
# that does not compute the right values. The exercises without one are what issue 31 leaves to do.
FORGES = sorted(p.stem.removeprefix("forge_") for p in DESCRIBED.glob("forge_*.py"))
FORGED = sorted({f.split("_")[0] for f in FORGES})
REACHED = ["ex1", "ex2", "ex3", "ex5", "ex6", "ex7", "ex8", "ex9", "ex10"]  # exercises whose technique checks read the program (graders/kit/program.py)
SEED = 31_031

INSTALL = {
    "plain": '''
def _install(name, fn):
    fn.is_probe = True
    setattr(_sys.modules["graders.exercises." + _MODULE + ".probes"], name, fn)
''',
    "code": '''
def _install(name, fn):
    getattr(_sys.modules["graders.exercises." + _MODULE + ".probes"], name).__code__ = fn.__code__
''',
}


def submission(ex_id: str, into: Path, way: str | None, forge: str | None = None) -> Path:
    """notech_<ex>.py, preceded (for a forge) by the attack kit, _install and forge_<forge>.py."""
    into.mkdir(parents=True, exist_ok=True)
    module = catalog.module_name(ex_id)
    text = (DESCRIBED / f"notech_{ex_id}.py").read_text()
    if way is not None:
        kit = (ROOT / "tests" / "attacks" / "kit.py").read_text().replace(
            "{checks!r}", repr({module: list(declared(ex_id))}))
        text = kit + INSTALL[way] + (DESCRIBED / f"forge_{forge or ex_id}.py").read_text() + "\n" + text
    (into / f"{module}.py").write_text(text)
    return into


def score(run, ex_id: str) -> int:
    return run.exercise(ex_id)["score"]


def rounds(cases) -> list[list[tuple[str, str]]]:
    """The (forge, way) cases in as few runs of the command as can hold them: a run grades one
    module per exercise, each in its own grading process (and under --sandbox its own worker),
    so forges of different exercises share a run and the forges of one exercise take turns."""
    out: list[list[tuple[str, str]]] = []
    for forge, way in cases:
        ex_id = forge.split("_")[0]
        spare = next((r for r in out if all(f.split("_")[0] != ex_id and w == way for f, w in r)), None)
        if spare is None:
            out.append(spare := [])
        spare.append((forge, way))
    return out


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """ex -> the technique-free module's points under --sandbox, and (forge, way) -> the forge's
    run, each exercise graded in a process of its own as always, several exercises to a run."""
    folder = tmp_path_factory.mktemp("honest")
    for ex_id in FORGED:
        submission(ex_id, folder, None)
    run = grade(folder, FORGED, "--sandbox", "--seed", str(SEED))
    honest = {ex_id: score(run, ex_id) for ex_id in FORGED}
    forged = {}
    for i, batch in enumerate(rounds([tuple(case.values) for case in CASES])):
        folder = tmp_path_factory.mktemp(f"forged-{i}")
        for forge, way in batch:
            submission(forge.split("_")[0], folder, way, forge)
        run = grade(folder, sorted({f.split("_")[0] for f, _ in batch}), "--sandbox", "--seed", str(SEED))
        forged.update({case: run for case in batch})
    return honest, forged


# A plain replacement is caught by the worker's guard for every exercise, whatever the forged probe
# sends: tried once per exercise, with forge_<ex>.py. A swapped __code__ passes the guard, so every
# forge is tried that way; it is stopped only where the judge reads the program itself.
CASES = [pytest.param(forge, way, marks=() if forge.split("_")[0] in REACHED or way == "plain" else
                      pytest.mark.xfail(reason="issue 31: not yet", strict=True))
         for forge in FORGES for way in INSTALL if way == "code" or forge in FORGED]


@pytest.mark.parametrize(("forge", "way"), CASES)
def test_a_forged_description_or_program_earns_no_technique_points_under_the_sandbox(forge, way, graded):
    ex_id = forge.split("_")[0]
    honest, forged = graded
    run = forged[(forge, way)]
    most = sum(declared(ex_id).values())
    got = score(run, ex_id)
    # A forge that fails in the learner's process (a probe's arguments changed since it was written)
    # earns nothing and proves nothing: its forged reply must have reached the judge.
    raised = {check: message for check, message in run.lost(ex_id).items() if "your code raised" in message}
    assert not raised, (forge, way, raised)
    assert got <= most // 2, (forge, way, got, most, run.exercise(ex_id)["reason"], run.lost(ex_id))
    assert got <= honest[ex_id], (forge, way, got, honest[ex_id], run.lost(ex_id))


def test_ex6_a_dots_label_on_checkpoints_that_keep_nothing_earns_no_dots_point(tmp_path):
    # ex6: a name is not what a checkpoint keeps (tests/attacks/described/relabel_ex6.py, put in
    # place by swapping __code__, on a right per-block model).
    module = catalog.module_name("ex6")
    kit = (ROOT / "tests" / "attacks" / "kit.py").read_text().replace("{checks!r}", repr({module: list(declared("ex6"))}))
    text = kit + INSTALL["code"] + (DESCRIBED / "relabel_ex6.py").read_text() + "\n" + \
        (ROOT / "reference" / f"{module}.py").read_text()
    (tmp_path / f"{module}.py").write_text(text)
    run = grade(tmp_path, ["ex6"], "--sandbox", "--seed", str(SEED))
    lost = run.lost("ex6")
    assert {"dots_uses_dots_saveable", "dots_memory_lies_between"} <= set(lost), lost
    assert "the program does not keep what its policy says" in lost["dots_uses_dots_saveable"], lost
