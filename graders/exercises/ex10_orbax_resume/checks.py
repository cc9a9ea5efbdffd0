"""Grader for Exercise 10: the whole training state saved with Orbax and restored, straight into
its shards, onto another mesh; resuming equals never stopping.

The grader trains its own model (graders/exercises/ex10_orbax_resume/probes.py: BatchNorm, Dropout, AdamW
with a warmup schedule, a dropout stream) from a starting state it draws, with non-zero counters.
The worker trains it k steps on mesh A, calls the learner's save, then the learner's restore onto
a target mesh (in a process forked before the learner's module was imported, which never saved, as a
job restarted after save), and
trains m more steps from what came back; it sends back every number, what the
checkpoint folder held, where each restored leaf lives and every piece of data placed on a device
while restore ran. The expected numbers are the grader's own: the same steps trained straight
through, and its own resume (the state moved to the target mesh by the grader). The checkpoint is
read here with the grader's own StandardCheckpointer.

Under --sandbox (issue 31), what the grader reads or runs itself decides: the checkpoint (the
folder's bytes, written to a folder of the judge's and read with its own StandardCheckpointer,
held to its own state after k steps); the resumes (the values restore produced, sent as arrays,
held to the saved state: exactly those values make the grader's m steps its own resume, own_runs;
the steps the worker ran can only take a point away); the restored step, counts, moments,
statistics and dropout stream (values held to the grader's own). What happens inside the
learner's restore and save (where each piece of data lands, make_state's calls, each leaf's
placement, the folder at the moment save returned, what a second save raised) is seen in the
learner's process only: those checks read the worker's report, and the ones that say a restore
or a save used the checkpoint (restore_reads_each_shard_straight_onto_its_device,
restore_never_holds_a_whole_array, save_returns_after_the_write_is_finished) also need the
grader's own reading of an Orbax checkpoint holding the parameters after k steps
(read_from_the_checkpoint). The first also needs the learner's restore to read the checkpoint at
the path it is given (reads_the_given_checkpoint): the grader writes the learner's checkpoint again,
in its layout, with another state's numbers (its counters and names as saved), and the worker runs
the learner's restore, in the process that saved, on its files
at a path the learner's save never wrote, then at the very path the experiment's save wrote (that
folder replaced by them) onto a target mesh with the axes in the other order than the drawn one's;
restore must hand back that state both times, not the one saved, and place it as the experiment's.
"""

import functools
import json
import os
import re
import secrets
import shutil
import tempfile
from pathlib import PurePosixPath

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from flax import nnx
from jax.sharding import NamedSharding

from graders.kit import figure_store
from graders.kit.expected import expected
from graders.kit.verdicts import Verdict, fail
from graders.kit.numeric import fmt, is_close, rng
from graders.exercises.ex10_orbax_resume.probes import (
    AXES, MESH_A, build, fresh_state, is_key, leaves_of, listing, mesh, read_folder, sharding_key, spec_for, train,
    unpack, values_of,
)

# The meshes restore is asked to restore onto besides mesh A: 4 of the 8 devices, so that data read
# onto the devices it was saved from (all 8) lands outside them, and "model" of 2 or 4, so that the
# kernels stay split; one with its axes in the other order. Every grading restores onto all three:
# the experiment's restore onto one drawn, the grader's checkpoint at the path save wrote onto one
# with the axes in the other order (saved_path_target), the one at another path onto the third
# (third_target) as well as onto mesh A: a restore that takes another route on one of them only
# shows it there.
TARGETS = (
    {"shape": (2, 2), "axes": AXES, "devices": (4, 5, 6, 7)},
    {"shape": (1, 4), "axes": AXES, "devices": (0, 2, 4, 6)},
    {"shape": (2, 2), "axes": ("model", "data"), "devices": (7, 5, 3, 1)},
)
# Slack on the difference the grader measures between its own resume on the target mesh and its own
# uninterrupted run (measured here: 0 to 1e-6 for the losses, up to 2.4e-7 for the state): a right
# restore reproduces the grader's resume bit for bit (the same program on the same arrays), so any
# slack above 1 only covers a layout the compiler schedules differently. The package's wrong
# solutions move the numbers by 0.05 or more.
CROSS_MESH_SLACK = 4.0
# Below this the grader's own difference is rounding of the last bit or two: float32's epsilon
# times the value, for values a few units large.
FLOAT32_FLOOR = 4 * float(np.finfo(np.float32).eps)
# A second save to a path that holds a checkpoint may fail, with an error that says why: an error
# whose message names the path, or says one of these, does (Orbax's own: "Destination ... already
# exists."); a bare assert, or a TypeError from a bug, does not.
SAYS_IT_EXISTS = ("exist", "already", "overwrit", "present")
# Leaves of a checkpoint the grader reads back at most: the state holds a few thousand numbers.
MAX_CHECKPOINT_ELEMENTS = 1 << 22
# Collectives of a program restore runs that carry data from one device to another as it is. An
# all-reduce or a reduce-scatter adds numbers up (a checksum, a norm, an evaluation of the restored
# model): it carries the state only where its result has a split array's shape, whole or a shard (a
# psum of zero-padded blocks). Such collectives moving as many numbers as the largest shard holds are
# moving the state (a norm gathered over the mesh moves a few numbers per array; a smoke test's
# output may have a shard's shape by chance, and holds fewer).
CARRYING = ("all-gather", "collective-permute", "all-to-all", "collective-broadcast")
# A part of the state the checkpoint lacks, handed back within this relative distance of its saved
# value (about 800 float32 ulps), came from the saved value, nudged: the checks that hold the
# resume to the uninterrupted run cannot tell such a copy from the value (tests/corpus/ex10/
# batch_stats_from_a_file_in_tmp_one_ulp_off). A restore that builds the part afresh hands back
# make_state's value, which is exempt (BatchNorm's variance starts at 1 and moves by about 1% a step).
NEAR_SAVED = 1e-4
# Files of a checkpoint folder read for numbers written outside its arrays (metadata, JSON items, pointers).
MAX_TEXT = 1 << 20


# --- the draw --------------------------------------------------------------------------------

def draw(seed: int) -> dict:
    """The configuration, the target mesh and the step counts of this grading."""
    r = rng(seed)
    dh = int(r.choice([8, 16, 24, 32]))  # divides by 4 ("model" on A) and 2
    din = int(r.choice([d for d in range(5, 13) if d != dh]))
    dout = int(r.choice([d for d in range(3, 8) if d not in (din, dh)]))
    k, m = int(r.integers(2, 4)), int(r.integers(2, 4))
    warmup = k + m + int(r.integers(1, 4))  # the resume falls inside the warmup: the LR depends on the step
    peak = float(r.choice([3e-3, 1e-2, 3e-2]))
    config = {"din": din, "dh": dh, "dout": dout, "batch": int(r.choice([8, 12, 16])),
              "rate": float(r.choice([0.25, 0.5])), "momentum": float(r.choice([0.8, 0.9])),
              "peak": peak, "warmup": warmup, "decay_steps": warmup + int(r.integers(8, 20)), "end": peak / 10,
              "wd": float(r.choice([1e-3, 1e-2])), "init_seed": int(r.integers(1 << 16)),
              "key": [int(v) for v in r.integers(0, 2**32, size=2, dtype=np.uint64)]}
    target, step0, count0 = TARGETS[int(r.integers(len(TARGETS)))], int(r.integers(1, 5)), int(r.integers(20, 60))
    return {"config": config, "k": k, "m": m, "target": target, "step0": step0, "count0": count0}


_ABSTRACT: dict = {}  # configuration -> its abstract leaves (one draw per grading)


def abstract_leaves(config: dict) -> list:
    """(path name, ShapeDtypeStruct) of the grader's training state."""
    key = repr(sorted(config.items()))
    if key not in _ABSTRACT:
        _ABSTRACT[key] = leaves_of(nnx.eval_shape(lambda: fresh_state(config)))
    return _ABSTRACT[key]


def start_values(d: dict, seed: int) -> dict:
    """A state mid-training: every number drawn, the optimizer's step and counts at step0, the
    dropout stream's count at count0 (never 0, so that a stream restarted at 0 shows)."""
    config, r = d["config"], rng(seed)
    values = {}
    for name, leaf in abstract_leaves(config):
        shape, dtype = tuple(leaf.shape), leaf.dtype
        if name.endswith("dropout/key/value"):
            values[name] = np.asarray(config["key"], np.uint32)
        elif name.endswith("dropout/count/value"):
            values[name] = np.asarray(d["count0"], dtype)
        elif name.endswith("count/value") or name.endswith("step/value"):
            values[name] = np.asarray(d["step0"], dtype)
        elif "/nu/" in name:
            values[name] = r.uniform(1e-4, 1e-3, shape).astype(dtype)
        elif "/mu/" in name:
            values[name] = (r.normal(size=shape) * 1e-2).astype(dtype)
        elif name.endswith("bn/var/value"):
            values[name] = r.uniform(0.5, 1.5, shape).astype(dtype)
        elif name.endswith("bn/scale/value"):
            values[name] = (1 + 0.1 * r.normal(size=shape)).astype(dtype)
        elif name.endswith("kernel/value"):
            values[name] = (r.normal(size=shape) * 0.4).astype(dtype)
        else:  # biases, the BatchNorm shift and running mean
            values[name] = (r.normal(size=shape) * 0.1).astype(dtype)
    return values


def batches(d: dict, seed: int) -> list:
    config, r = d["config"], rng(seed)
    return [(r.normal(size=(config["batch"], config["din"])).astype(np.float32),
             r.normal(size=(config["batch"], config["dout"])).astype(np.float32)) for _ in range(d["k"] + d["m"])]


SEEDS = {"values": 1, "batches": 2, "second": 3, "given": 4}


@functools.cache
def inputs(seed: int):
    d = draw(seed)
    return d, start_values(d, seed * 10 + SEEDS["values"]), batches(d, seed * 10 + SEEDS["batches"])


@functools.cache
def second_values(seed: int) -> dict:
    """Another state at the step the first was saved at (its counters as they were then, its
    numbers other): what the second save to the same path writes."""
    d = draw(seed)
    later = dict(d, step0=d["step0"] + d["k"], count0=d["count0"] + d["k"])
    return start_values(later, seed * 10 + SEEDS["second"])


@functools.cache
def given_values(seed: int) -> dict:
    """The state the grader writes into the learner's checkpoint (rewritten): numbers of a third draw
    (neither save's: a file the refused second save still wrote beside the checkpoint holds the
    second's) and another dropout key, the counters as saved. The counters stay, so that a layout
    filing the checkpoint under its step (a step folder, a LATEST pointer, an index) stays one
    consistent checkpoint: a restore that takes its counters from memory instead is one the
    experiment's restores catch, as they run in a process that never saved (probes.before_solution)."""
    d = draw(seed)
    values = dict(start_values(dict(d, step0=d["step0"] + d["k"], count0=d["count0"] + d["k"]),
                               seed * 10 + SEEDS["given"]))
    r = rng(seed * 10 + SEEDS["given"] + 1)
    for name, value in values.items():
        if name.endswith("dropout/key/value"):
            values[name] = r.integers(0, 2**32, size=value.shape, dtype=np.uint64).astype(value.dtype)
    return values


# --- the grader's own runs -------------------------------------------------------------------

def _plain(values: dict) -> dict:
    return {k: [str(v.dtype), list(v.shape), np.asarray(v).reshape(-1).tolist()] for k, v in values.items()}


def _arrays(plain: dict) -> dict:
    return {k: np.asarray(flat, dtype).reshape(shape) for k, (dtype, shape, flat) in plain.items()}


@functools.cache
@expected
def own_runs(seed: int) -> dict:
    """The grader's own training from this grading's draw: the state after k steps on mesh A, the
    k+m steps straight through on A (losses of the last m, final state), and its own resumes: the
    state after k built afresh from its values on mesh A, and on the target mesh (jax.device_put
    where spec_for says), m steps on each. A restore that hands back exactly the saved values
    hands the grader's steps these very inputs: these runs are then the grader's own run of the m
    steps from what the learner's restore produced."""
    d, values, data = inputs(seed)

    def compute():
        config, k = d["config"], d["k"]
        m_a, m_t = mesh(MESH_A), mesh(d["target"])
        objects = build(config, values, m_a)
        train(config, objects, data[:k], m_a)
        saved = values_of(objects)
        straight = train(config, objects, data[k:], m_a)
        again_objects = build(config, saved, m_a)
        again = train(config, again_objects, data[k:], m_a)
        resumed_objects = build(config, saved, m_t)
        resumed = train(config, resumed_objects, data[k:], m_t)
        return {"saved": _plain(saved), "straight": straight, "straight_final": _plain(values_of(objects)),
                "again": again, "again_final": _plain(values_of(again_objects)),
                "resumed": resumed, "resumed_final": _plain(values_of(resumed_objects))}

    got = figure_store.stored("ex10 own runs", (seed, repr(d)), compute)
    return {"saved": _arrays(got["saved"]), "straight": np.asarray(got["straight"], np.float32),
            "straight_final": _arrays(got["straight_final"]), "again": np.asarray(got["again"], np.float32),
            "again_final": _arrays(got["again_final"]), "resumed": np.asarray(got["resumed"], np.float32),
            "resumed_final": _arrays(got["resumed_final"])}


# --- what came back ----------------------------------------------------------------------------

def stage(result: dict, name: str, needed_by: str = "") -> None:
    """End the check with what the learner's code did at a stage that failed."""
    error = result.get(name)
    if error:
        depends = needed_by and name != needed_by and error["outcome"] != "not_attempted"
        raise Verdict(error["outcome"], f"{needed_by} depends on {name}, which failed: {error['message']}"
                      if depends else error["message"])


SAME, OTHER = 0, 1  # the runs of an experiment: restored onto mesh A, onto the drawn target


_EXPERIMENTS: dict = {}  # seed -> ("value", result) or ("raised", what ended it)


def experiment(worker, seed: int) -> dict:
    """The worker's whole experiment for this grading, run once: every check reads it, and a run
    that ended early (the learner's code out of time, or exiting) ends every check the same way."""
    if seed not in _EXPERIMENTS:
        d, values, data = inputs(seed)
        try:
            _EXPERIMENTS[seed] = ("value", worker.experiment(d["config"], values, data, d["k"], [MESH_A, d["target"]],
                                                             second_values(seed)))
        except BaseException as exc:
            _EXPERIMENTS[seed] = ("raised", exc)
    kind, got = _EXPERIMENTS[seed]
    if kind == "raised":
        raise got
    return got


def run_of(worker, seed: int, which: int, needed_by: str) -> dict:
    """One restore and what followed it, or the check ends with the stage that failed."""
    result = experiment(worker, seed)
    stage(result, "save", needed_by)
    run = result["runs"][which]
    stage(run, "restore", needed_by)
    return run


def restored(worker, seed: int) -> tuple[dict, dict]:
    """(what restore onto the drawn target mesh returned, described leaf by leaf; that run)."""
    run = run_of(worker, seed, OTHER, "restore")
    return run["restored"], run


def show(name: str) -> str:
    """A leaf's path name as the learner reaches it: "1/opt_state/0/mu/l1/kernel/value" is
    optimizer.opt_state[0].mu.l1.kernel."""
    first, *rest = name.removesuffix("/value").split("/")
    owner = {"0": "model", "1": "optimizer", "2": "rngs"}.get(first, first)
    return owner + "".join(f"[{part}]" if part.isdigit() else f".{part}" for part in rest)


def leaf(found: dict, name: str, what: str):
    """A restored leaf's value, or a failed check naming the leaf that is missing."""
    got = found.get(name)
    if got is None or got["value"] is None:
        have = "absent" if got is None else f"not an array ({got['dtype']})"
        fail(f"{what} ({show(name)}) is {have} in what "
             "restore returned. Hint: return the objects make_state builds, with every leaf restored.")
    return np.asarray(got["value"])


def same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and np.array_equal(a.astype(np.float64), b.astype(np.float64))


GROUPS = (("the parameters", lambda n: n.startswith("0/") and "/bn/mean" not in n and "/bn/var" not in n),
          ("the BatchNorm statistics", lambda n: "/bn/mean" in n or "/bn/var" in n),
          ("Adam's moments", lambda n: "/mu/" in n or "/nu/" in n),
          ("the optimizer's step and the schedule's counts", lambda n: n.startswith("1/") and n.endswith("count/value")
           or n == "1/step/value"),
          ("the dropout stream (key and count)", lambda n: n.startswith("2/")))


def in_parts(name: str, groups: list) -> bool:
    """Whether a leaf belongs to one of these GROUPS (by their names)."""
    return any(group in groups and belongs(name) for group, belongs in GROUPS)


def restored_differences(found: dict, saved: dict) -> list[str]:
    """Which parts of the saved state came back other than they were saved."""
    wrong = []
    for group, belongs in GROUPS:
        names = [n for n in saved if belongs(n)]
        if any(found.get(n) is None or found[n]["value"] is None or not same(found[n]["value"], saved[n])
               for n in names):
            wrong.append(group)
    return wrong


def diagnosis(result: dict, own: dict) -> str:
    if result.get("restored") is None:
        return ""
    wrong = restored_differences(result["restored"], own["saved"])
    if not wrong:
        return ""
    return (f" What restore returned already differs from what was saved in {', '.join(wrong)}: the checkpoint must "
            "hold the whole training state, and restore must put all of it back.")


def check_run(worker, seed: int, which: int, note=None) -> None:
    d = draw(seed)
    own = own_runs(seed)
    exact = which == SAME
    target = MESH_A if exact else d["target"]
    result = run_of(worker, seed, which, "resuming")
    if result["train"] and not exact and misplaced(d, result["restored"]):
        fail("the grader could not train on from what restore returned, because of where it put the arrays: this "
             "depends on restored_leaves_have_the_requested_shardings, which fails: " + misplaced(d, result["restored"]))
    stage(result, "train")
    k, m = d["k"], d["m"]
    where = "on the mesh it was saved from" if exact else f"on a {target['shape']} mesh of devices {list(target['devices'])}"
    expected_losses, expected_final = own["straight"], own["straight_final"]
    if exact:
        bounds = {"losses": 0.0, **{name: 0.0 for name in expected_final}}
    else:
        measured = {"losses": np.abs(own["resumed"].astype(np.float64) - expected_losses), **{
            name: np.abs(own["resumed_final"][name].astype(np.float64) - expected_final[name].astype(np.float64))
            for name in expected_final}}
        scale = {"losses": np.abs(expected_losses), **{n: np.abs(v.astype(np.float64)) for n, v in expected_final.items()}}
        bounds = {name: CROSS_MESH_SLACK * float(np.max(diff, initial=0.0))
                  + FLOAT32_FLOOR * float(np.max(scale[name], initial=1.0)) for name, diff in measured.items()}
    how = "bit for bit" if exact else "within the grader's measured rounding across meshes"
    whole = (" Hint: save the whole state (parameters, BatchNorm statistics, nnx.state(optimizer) with its step, "
             "nnx.state(rngs)) and put all of it back.")
    hint = diagnosis(result, own) or whole

    def wrong_run(losses, final) -> str | None:
        """What differs between a run of the m steps and the uninterrupted run, or None."""
        losses = np.asarray(losses, np.float32)
        if losses.shape != expected_losses.shape:
            return f"after restoring {where}, the grader's {m} steps gave {losses.size} losses; expected {m}."
        diff = np.abs(losses.astype(np.float64) - expected_losses)
        if not np.all(diff <= bounds["losses"]):
            step = int(np.argmax(diff))
            return (f"after restoring {where}, the losses of steps {k + 1}..{k + m} should equal those of the same "
                    f"steps trained without stopping, {how}: expected {fmt(expected_losses)}, got {fmt(losses)} (step "
                    f"{k + step + 1} differs by {float(diff.max(initial=0.0)):.3g}).{hint}")
        for name, expected in expected_final.items():
            got = final.get(name)
            if got is None or np.shape(got) != expected.shape or not np.all(
                    np.abs(np.asarray(got, np.float64) - expected.astype(np.float64)) <= bounds[name]):
                shown = "absent" if got is None else fmt(got)
                return (f"after restoring {where} and {m} more steps, {show(name)} should equal the "
                        f"uninterrupted run's, {how}: expected {fmt(expected)}, got {shown}.{hint}")
        return None

    # The verdict is the grader's own run of the m steps from what restore produced (its values,
    # sent as arrays): restore's values exactly the saved state give the grader's steps the inputs
    # of its own resume (own_runs: built afresh on this mesh from the saved values), so that run
    # is the grader's run from them; any other values are not the state the uninterrupted run had
    # after k steps. The steps run in the learner's process on the learner's arrays (where they
    # lie) can only take the point away, and word the message when the values differ.
    losses, final = result["losses"], result["final"] or {}
    differs = restored_differences(result["restored"] or {}, own["saved"])
    if differs:
        fail(wrong_run(losses, final) or (
            f"after restoring {where}, what restore returned differs from what was saved in {', '.join(differs)}: "
            f"the grader's {m} steps from it are not steps {k + 1}..{k + m} of the uninterrupted run.{whole}"))
    judged = wrong_run(*((own["again"], own["again_final"]) if exact else (own["resumed"], own["resumed_final"])))
    if judged:
        fail(judged)
    wrong = wrong_run(losses, final)
    if wrong:
        fail(wrong)
    diff = np.abs(np.asarray(losses, np.float64) - expected_losses)
    if note is not None and not exact:
        own_gap = max(float(np.max(measured[name], initial=0.0)) for name in measured)
        gap = max([float(np.max(diff, initial=0.0))] + [
            float(np.max(np.abs(np.asarray(final[n], np.float64) - v.astype(np.float64)), initial=0.0))
            for n, v in expected_final.items()])
        note(f"resumed {where}: largest difference from the uninterrupted run {gap:.1e} (the grader's own resume "
             f"there: {own_gap:.1e})")


# --- checks: resuming equals never stopping ----------------------------------------------------

@pytest.mark.points(1)
def test_resumed_on_the_same_mesh_equals_uninterrupted(worker, seed):
    """k steps, save, restore onto the same mesh, m steps: losses and state bit for bit as k+m steps straight."""
    check_run(worker, seed, SAME)


@pytest.mark.points(1)
def test_resumed_on_another_mesh_matches_uninterrupted(worker, seed, note):
    """Restored onto another mesh, m more steps match k+m straight within the grader's measured rounding."""
    check_run(worker, seed, OTHER, note)


@pytest.mark.points(1)
def test_step_and_schedule_continue(worker, seed):
    """The restored optimizer's step, its schedule's counts and Adam's moments are those saved."""
    d = draw(seed)
    found, _ = restored(worker, seed)
    saved = own_runs(seed)["saved"]
    expected = d["step0"] + d["k"]
    step = leaf(found, "1/step/value", "optimizer.step")
    counts = {n: leaf(found, n, "the schedule's count") for n in saved if n.startswith("1/opt_state") and
              n.endswith("count/value")}
    moments = [n for n in saved if "/mu/" in n or "/nu/" in n]
    zero_moments = all(not np.any(np.asarray(found[n]["value"])) for n in moments
                       if found.get(n) is not None and found[n]["value"] is not None)
    wrong_counts = {n: int(v) for n, v in counts.items() if int(v) != expected}
    if int(step) != expected and wrong_counts:
        only = (" Adam's moments came back zero too: only the parameters were saved, so the warmup schedule "
                "restarts (its learning rate at step 0 is 0) and Adam forgets every gradient it saw."
                if zero_moments else "")
        fail(f"after restoring, optimizer.step is {int(step)} and the schedule's counts are "
             f"{sorted(set(wrong_counts.values()))}; expected {expected} (the state was saved after {d['k']} steps "
             f"from step {d['step0']}).{only} Hint: save nnx.state(optimizer) whole: opt_state (with its counts) and "
             "step.")
    if int(step) != expected:
        fail(f"after restoring, optimizer.step is {int(step)}, expected {expected}, though the schedule's counts are "
             "right: the step was not saved (nnx.state(optimizer) holds it beside opt_state), so anything that "
             "reads optimizer.step (logging, the next checkpoint's number) restarts. Hint: save nnx.state(optimizer) "
             "whole.")
    if wrong_counts:
        name, value = next(iter(wrong_counts.items()))
        fail(f"after restoring, {show(name)} is {value}, expected {expected}: the learning-rate "
             "schedule reads its position from the optimizer state's counts, so it restarts. Hint: save and restore "
             "nnx.state(optimizer) whole.")
    wrong = [n for n in moments if not same(leaf(found, n, "Adam's moment"), saved[n])]
    if wrong:
        fail(f"after restoring, Adam's moment {show(wrong[0])} is "
             f"{fmt(found[wrong[0]]['value'])}, expected {fmt(saved[wrong[0]])}"
             f"{' (zeros: a fresh optimizer state)' if zero_moments else ''}. Hint: save and restore "
             "nnx.state(optimizer) whole.")


@pytest.mark.points(1)
def test_batchnorm_statistics_continue(worker, seed):
    """The restored BatchNorm running mean and variance are those saved."""
    found, _ = restored(worker, seed)
    saved = own_runs(seed)["saved"]
    for name in ("0/bn/mean/value", "0/bn/var/value"):
        got = leaf(found, name, "BatchNorm's running statistic")
        if same(got, saved[name]):
            continue
        fresh = np.zeros_like(got) if "mean" in name else np.ones_like(got)
        why = (" These are BatchNorm's initial values (mean 0, variance 1): no BatchNorm statistics were saved. "
               "They are not parameters: nnx.state(model, nnx.Param) leaves them out; save "
               "nnx.state(model, nnx.BatchStat) too (or nnx.state(model) whole)." if same(got, fresh) else
               " Hint: save nnx.state(model, nnx.BatchStat) and restore it as it was saved.")
        fail(f"after restoring, BatchNorm's running {name.split('/')[2]} is {fmt(got)}, expected "
             f"{fmt(saved[name])}.{why}")


@pytest.mark.points(1)
def test_dropout_stream_continues(worker, seed):
    """The restored rngs hold the saved dropout key and count: the next masks are the uninterrupted run's."""
    d = draw(seed)
    found, _ = restored(worker, seed)
    saved = own_runs(seed)["saved"]
    key = leaf(found, "2/dropout/key/value", "the dropout stream's key")
    count = int(leaf(found, "2/dropout/count/value", "the dropout stream's count"))
    expected_count = int(saved["2/dropout/count/value"])
    if not same(key, saved["2/dropout/key/value"]):
        fail(f"after restoring, the dropout stream's key is {np.asarray(key).tolist()}, expected "
             f"{saved['2/dropout/key/value'].tolist()}: the masks after resuming diverge from the uninterrupted "
             "run's. Hint: save nnx.state(rngs) and restore it; do not make a new nnx.Rngs.")
    if count != expected_count:
        why = (f" It is {count}: the RNG was not saved, so the stream starts again and dropout repeats the masks it "
               "drew before." if count < expected_count else " The stream was advanced past where it was saved.")
        fail(f"after restoring, the dropout stream's count is {count}, expected {expected_count} (it was "
             f"{d['count0']} before the {d['k']} steps, each of which draws one key).{why} Hint: save "
             "nnx.state(rngs) (its key and its count) and restore it.")


def misplaced(d: dict, found: dict) -> str | None:
    """What is wrong with where restore put the leaves on the drawn target mesh, or None."""
    target = mesh(d["target"])
    config = d["config"]
    for name, abstract in abstract_leaves(config):
        got = found.get(name)
        if got is None:
            return (f"{show(name)} is absent from what restore returned. Hint: return the objects "
                    "make_state builds, with every leaf restored.")
        expected = NamedSharding(target, spec_for(config, abstract.shape))
        if got["key"] == sharding_key(expected, len(abstract.shape)):
            continue
        ids = list(d["target"]["devices"])
        return (f"{show(name)} comes back {got['shown']}; expected {expected.spec} on the mesh "
                f"restore was given (devices {ids}). Hint: give each leaf of the template its sharding, "
                "jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)): Orbax restores every array "
                "where its template leaf says (without one, where the checkpoint was saved from).")
    return None


@pytest.mark.points(1)
def test_restored_leaves_have_the_requested_shardings(worker, seed):
    """Every leaf restore returns is placed as shardings(leaf) says, on the mesh it was given."""
    found, _ = restored(worker, seed)
    wrong = misplaced(draw(seed), found)
    if wrong:
        fail(wrong)


# --- checks: the checkpoint ----------------------------------------------------------------

def item_folders(folder: str) -> list[str]:
    """The folders holding an Orbax PyTree checkpoint (its _METADATA) under folder."""
    return sorted(root for root, _, names in os.walk(folder) if "_METADATA" in names)


def read_checkpoint_of(tree) -> list:
    """Every leaf of a checkpoint's tree (read_tree) on the host, as (path, array)."""
    return [(jax.tree_util.keystr(path), np.asarray(jax.random.key_data(value) if is_key(value) else value))
            for path, value in jax.tree_util.tree_flatten_with_path(tree)[0] if hasattr(value, "shape")]


def read_tree(item: str):
    """The tree of the checkpoint in item, read with the grader's own StandardCheckpointer onto the
    host (NumPy) where a leaf has a NumPy form; an item of one array (ocp.args.ArraySave, and the
    array of an ocp.args.JaxRandomKeySave item: its key data), which the PyTree reader cannot read,
    as that array alone, read with Orbax's ArrayCheckpointHandler."""
    try:
        return _read_pytree(item)
    except Exception as exc:  # an item of another handler, or none Orbax reads
        try:
            value = np.asarray(ocp.Checkpointer(ocp.ArrayCheckpointHandler()).restore(item))
        except Exception:  # not one array either: the PyTree reader's error says why
            raise exc from None
        if value.size > MAX_CHECKPOINT_ELEMENTS:
            fail("the checkpoint holds far more numbers than the training state has.")
        return value


def _read_pytree(item: str):
    reader = ocp.StandardCheckpointer()
    metadata = reader.metadata(item)
    tree = getattr(metadata, "item_metadata", metadata)
    shapes = [leaf for leaf in jax.tree.leaves(tree) if hasattr(leaf, "shape")]
    if sum(int(np.prod(leaf.shape)) for leaf in shapes) > MAX_CHECKPOINT_ELEMENTS:
        fail("the checkpoint holds far more numbers than the training state has.")
    target = jax.tree.map(lambda leaf: np.zeros(leaf.shape, leaf.dtype) if hasattr(leaf, "shape") else leaf, tree)
    try:
        return reader.restore(item, target)  # onto the host
    except Exception:  # a leaf that has no NumPy form: read it as it was saved
        return reader.restore(item)


def in_place_of(saved: dict, given: dict):
    """A function of a stored leaf of a checkpoint holding the `saved` state: that leaf holding `given`'s
    values wherever it held saved's (whole leaves, slices of a stack, runs packed into a larger array,
    the dropout key), the leaf itself (the very object) where it holds none of them."""
    swap, runs = {}, []
    for name, value in saved.items():
        if not same(value, given[name]):
            swap[(value.shape, np.asarray(value, np.float64).tobytes())] = given[name]
            if packable(value):  # a leaf packed with others into one stored array (see `inside`)
                runs.append((np.asarray(value, np.float64).reshape(-1), np.asarray(given[name], np.float64).reshape(-1)))

    def repacked(value: np.ndarray):
        """A stored float array holding saved leaves' numbers as runs (in either of its `orders`), with
        the given leaves' instead."""
        for transposed, flat in orders(value):
            out = None
            for old, new in runs:
                for i in runs_at(flat, old) if old.size < flat.size else ():
                    out = flat.copy() if out is None else out
                    out[i:i + old.size] = new
            if out is not None:
                return (out.reshape(value.T.shape).T if transposed else out.reshape(value.shape)).astype(value.dtype)
        return None

    def replaced(leaf):
        if not hasattr(leaf, "dtype") or not hasattr(leaf, "shape"):
            return leaf
        if is_key(leaf):
            data = np.asarray(jax.random.key_data(leaf))
            new = swap.get((data.shape, data.astype(np.float64).tobytes()))
            return leaf if new is None else jax.random.wrap_key_data(np.asarray(new, data.dtype),
                                                                      impl=jax.random.key_impl(leaf))
        if not (np.issubdtype(leaf.dtype, np.floating) or np.issubdtype(leaf.dtype, np.integer)):
            return leaf
        value = np.asarray(leaf)
        new = swap.get((value.shape, value.astype(np.float64).tobytes()))
        if new is None and np.issubdtype(value.dtype, np.floating) and value.ndim >= 2:  # a stack of leaves
            for axis, parts in slices(value):
                got = [swap.get((part.shape, part.astype(np.float64).tobytes())) for part in parts]
                if any(g is not None for g in got):
                    new = np.stack([part if g is None else np.asarray(g).astype(value.dtype)
                                    for part, g in zip(parts, got)], axis=axis)
                    break
        if new is None and np.issubdtype(value.dtype, np.floating):
            new = repacked(value)
        return leaf if new is None else np.asarray(new).astype(value.dtype)

    return replaced


def rewritten(folder: str, items: list, trees: list, saved: dict, given: dict) -> dict | str:
    """The checkpoint folder save wrote, with each of its items written again by the grader's own
    Orbax (its PyTree handler, the item's own OCDBT and Zarr3 settings from its _METADATA) holding
    `given`'s values wherever it held the saved state's (the floating-point numbers: whole leaves,
    slices of a stack, runs packed into a larger array; and the dropout key; the counters and everything
    else as they were): a checkpoint in the learner's own layout, holding a state the learner's save never wrote. The item's own checkpoint metadata
    (_CHECKPOINT_METADATA: its handler, custom_metadata), the custom_metadata of its _METADATA, and every entry of the item the rewrite
    does not write (another item inside it, a file, a symlink, every name) are kept. As files
    (relative path -> bytes, a symlink -> its target), or a text saying why the grader's Orbax could
    not write it."""
    replaced = in_place_of(saved, given)

    for item, tree in zip(items, trees):
        try:
            with open(os.path.join(item, "_METADATA")) as f:
                layout = json.load(f)
            # A name the learner's files cannot hold already (one left there would block the rewrite).
            again = f"{item}.grader-{secrets.token_hex(8)}"
            if isinstance(tree, np.ndarray):  # an item of one array (read_tree): written as Orbax writes one
                handler = ocp.ArrayCheckpointHandler()
            else:
                handler = ocp.PyTreeCheckpointHandler(use_ocdbt=bool(layout.get("use_ocdbt", True)),
                                                      use_zarr3=bool(layout.get("use_zarr3", False)))
            written = jax.tree.map(replaced, tree)
            if not isinstance(tree, np.ndarray):
                shardings = saved_shardings(item)
                written = jax.tree_util.tree_map_with_path(
                    lambda path, leaf: placed_as_saved(leaf, shardings.get(jax.tree_util.keystr(path))), written)
            if isinstance(tree, np.ndarray):
                ocp.Checkpointer(handler).save(again, written)
            else:  # the item's own custom_metadata (a format record, counters) as the learner's save wrote it
                ocp.Checkpointer(handler).save(again, args=ocp.args.PyTreeSave(
                    written, custom_metadata=layout.get("custom_metadata")))
            # The item's own metadata, and what else it holds, as the learner's save left them.
            own = os.path.join(again, "_CHECKPOINT_METADATA")
            if os.path.lexists(own):
                os.remove(own)
            for name in os.listdir(item):
                if not os.path.lexists(os.path.join(again, name)):
                    os.rename(os.path.join(item, name), os.path.join(again, name))
            shutil.rmtree(item)
            os.rename(again, item)
        except Exception as exc:  # a layout the grader's Orbax does not write
            return f"{os.path.relpath(item, folder)}: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    return read_folder(folder, listing(folder))


def saved_shardings(item: str) -> dict:
    """Leaf path (keystr) -> the sharding the item's metadata records for that leaf (the mesh the
    learner's save wrote it from, with this process's devices of the same ids), where it records one
    this process can make. The rewrite writes each leaf placed so, as the learner's save wrote it, so
    that the rewritten checkpoint's metadata records the same shardings (a restore may read them)."""
    try:
        metadata = ocp.StandardCheckpointer().metadata(item)
    except Exception:  # no PyTree metadata: the leaves are written from the host, as before
        return {}
    found = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(getattr(metadata, "item_metadata", metadata))[0]:
        recorded = getattr(leaf, "sharding", None)
        try:
            found[jax.tree_util.keystr(path)] = recorded.to_jax_sharding()
        except Exception:  # none recorded, or saved from devices this process does not have
            continue
    return found


def placed_as_saved(leaf, sharding):
    """`leaf` (a NumPy array, or an array read as it was saved) as a jax.Array placed with `sharding`; as it
    is where there is none, or it does not fit the leaf."""
    if sharding is None or not hasattr(leaf, "shape"):
        return leaf
    try:
        return jax.device_put(leaf, sharding)
    except Exception:
        return leaf


def missing_parts(stored: list, saved: dict, counters: set = frozenset()) -> list[str]:
    """The parts of the saved state whose values the checkpoint does not hold: in its arrays (a leaf of
    its own, a vector packed with others: `inside`, a slice of a stack: `stacked_in`), or for a counter
    (a whole number: the step, a count) in a small array of counters or among `counters`, the numbers
    Orbax wrote as its metadata (orbax_numbers)."""
    def holds(value) -> bool:
        if np.ndim(value) == 0 and np.issubdtype(np.asarray(value).dtype, np.integer) and (
                int(value) in counters or counter_in_a_small_vector(value, stored)):
            return True
        return (any(same(v, value) for _, v in stored) or (packable(value) and inside(value, stored))
                or stacked_in(value, stored))

    wrong = []
    for group, belongs in GROUPS:
        names = [n for n in saved if belongs(n)]
        if group.startswith("the optimizer's step"):
            names = [n for n in names if n.startswith("1/opt_state")]  # the step's number is the counts' number
        if not all(holds(saved[n]) for n in names):
            wrong.append(group)
    return wrong


def whole_numbers(value, found: set) -> None:
    """Add every whole number in a JSON value to found: numbers, digits in strings, keys too."""
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)) and float(value).is_integer():
        found.add(int(value))
    elif isinstance(value, str):
        found.update(int(t) for t in re.findall(r"\d+", value))
    elif isinstance(value, dict):
        for k, v in value.items():
            whole_numbers(k, found)
            whole_numbers(v, found)
    elif isinstance(value, list):
        for v in value:
            whole_numbers(v, found)


# Orbax's handlers of an item that records a few values as text (ocp.args.JsonSave, ocp.args.ProtoSave).
RECORD_HANDLERS = ("JsonCheckpointHandler", "ProtoCheckpointHandler")
# Whole numbers in one dict or list of bookkeeping (a step, counts, a version, a few sizes). One
# holding more is a table or data (a planned schedule keyed by step, a shuffle order), in which any
# small counter stands by chance: it attests no counter.
MAX_BOOKKEEPING = 32


def _counted(v) -> int:
    """1 for a whole number or a string of digits alone (a step written as "15"), else 0: the words
    of a record (a dtype "float32", a path "opt_state/0/mu") are names, and a fraction (a norm, a
    learning rate) is no counter."""
    if isinstance(v, bool):
        return 0
    if isinstance(v, (int, float)):
        return int(float(v).is_integer())
    return int(isinstance(v, str) and v.strip().isdigit())


def bookkeeping(value, depth: int = 0) -> set:
    """The whole numbers of a JSON document (as whole_numbers reads them), container by container:
    a list of more than MAX_BOOKKEEPING items, or a dict holding more than MAX_BOOKKEEPING numbers of
    its own (keys and values: `_counted`), is a table or data (a schedule, a shuffle order, a plan of
    one record per step), and nothing in it counts."""
    if depth > 64:
        return set()
    if not isinstance(value, (dict, list)):  # a number, or a text (a pointer, a protocol buffer)
        found: set = set()
        whole_numbers(value, found)
        return found if len(found) <= MAX_BOOKKEEPING else set()
    if isinstance(value, list) and len(value) > MAX_BOOKKEEPING:
        return set()
    own = list(value.items()) if isinstance(value, dict) else [(None, v) for v in value]
    scalars = [k for k, _ in own if k is not None] + [v for _, v in own if not isinstance(v, (dict, list))]
    if sum(map(_counted, scalars)) > MAX_BOOKKEEPING:
        return set()
    found = set()
    for v in scalars:
        whole_numbers(v, found)
    for _, v in own:
        if isinstance(v, (dict, list)):
            found |= bookkeeping(v, depth + 1)
    return found


def _json(data):
    """A small file's JSON value, or None."""
    if not isinstance(data, bytes) or len(data) > MAX_TEXT:
        return None
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None


def orbax_numbers(files: dict) -> set:
    """Every whole number Orbax itself wrote as the learner's metadata in a checkpoint folder: a
    checkpoint's custom_metadata (in its _CHECKPOINT_METADATA, and a PyTree item's own in its _METADATA:
    ocp.args.StandardSave(state, custom_metadata=...)), and the JSON items a
    CheckpointManager step holds beside its arrays (ocp.args.JsonSave or ProtoSave: items its
    _CHECKPOINT_METADATA names a RECORD_HANDLERS handler for) or such a checkpoint of its own beside
    them, read by `bookkeeping`. Counters saved there are part of the Orbax checkpoint as much as an integer array
    is; a text file of the learner's own is not."""
    found = set()
    json_items = set()
    for rel, data in files.items():
        if PurePosixPath(rel).name == "_METADATA":  # a PyTree item's own custom_metadata (StandardSave's)
            value = _json(data)
            if isinstance(value, dict):
                found |= bookkeeping(value.get("custom_metadata"))
        if PurePosixPath(rel).name != "_CHECKPOINT_METADATA":
            continue
        value = _json(data)
        if not isinstance(value, dict):
            continue
        found |= bookkeeping(value.get("custom_metadata"))
        handlers = value.get("item_handlers")
        step = PurePosixPath(rel).parent
        if isinstance(handlers, dict):
            json_items |= {str(step / name) for name, handler in handlers.items()
                           if isinstance(handler, str) and handler.endswith(RECORD_HANDLERS)}
        elif isinstance(handlers, str) and handlers.endswith(RECORD_HANDLERS):  # a record checkpoint of its own
            json_items.add(str(step))
    for rel, data in files.items():
        if str(PurePosixPath(rel).parent) in json_items and PurePosixPath(rel).name != "commit_success.txt":
            value = _json(data)
            if value is None and isinstance(data, bytes) and len(data) <= MAX_TEXT:  # a protocol buffer as text
                value = data.decode("utf-8", "replace")
            found |= bookkeeping(value)
    return found


def numbers_in(files: dict) -> set:
    """Every whole number the learner wrote in a checkpoint folder outside its arrays: in the names
    of folders and files outside Orbax's items, in a small file's JSON (a JSON item) or text, numbers
    as strings too, and in an item's custom_metadata; a file or metadata holding more numbers than
    bookkeeping does (a table, data) attests none (`bookkeeping`)."""
    found = set()
    walk = functools.partial(whole_numbers, found=found)
    # Inside an Orbax item its own files hold shapes, sizes and hashes, never the learner's numbers:
    # only the custom_metadata of its _CHECKPOINT_METADATA and of its _METADATA is read there.
    items = {str(PurePosixPath(rel).parent) for rel in files if PurePosixPath(rel).name == "_METADATA"}
    for rel, data in files.items():
        parts = PurePosixPath(rel).parts
        within = next((i for i in range(1, len(parts)) if str(PurePosixPath(*parts[:i])) in items), None)
        walk("/".join(parts[:within]) if within is not None else rel)
        if not isinstance(data, bytes) or len(data) > MAX_TEXT:
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:  # not text
            continue
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        if within is None:
            found.update(bookkeeping(value))
        elif parts[-1] in ("_CHECKPOINT_METADATA", "_METADATA") and isinstance(value, dict):
            found.update(bookkeeping(value.get("custom_metadata")))
    return found


def runs_at(flat: np.ndarray, run: np.ndarray) -> list[int]:
    """Where run's numbers stand, in order, inside flat (both 1-d float64): the start of each."""
    if run.size == 0 or flat.size < run.size:
        return []
    starts = np.flatnonzero(flat[:flat.size - run.size + 1] == run[0])
    return [int(i) for i in starts if np.array_equal(flat[i:i + run.size], run)]


def orders(array: np.ndarray) -> list[tuple[bool, np.ndarray]]:
    """(transposed, the numbers in that order as float64) of a stored array: row by row, and for a
    matrix column by column too (leaves stacked side by side, one per column)."""
    found = [(False, np.asarray(array, np.float64).reshape(-1))]
    if np.ndim(array) == 2:
        found.append((True, np.asarray(array, np.float64).T.reshape(-1)))
    return found


def inside(value: np.ndarray, stored: list) -> bool:
    """Whether value's numbers stand, in order, as a run inside one of the stored arrays (a leaf
    packed with others into one array, end to end or as a row or column of a stack)."""
    flat = np.asarray(value, np.float64).reshape(-1)
    return any(runs_at(order, flat) for _, array in stored
               if np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)
               for _, order in orders(array))


def packable(value) -> bool:
    """A leaf a checkpoint may hold packed with others into one array: a vector (a bias, a norm's
    scale, BatchNorm's statistics, their moments: small leaves no mesh splits) of floating-point
    numbers, not one number repeated (a zero moment stands anywhere). A kernel packed so is read whole
    wherever the pack is, which the placement checks judge by the kernels' own shards."""
    value = np.asarray(value)
    return value.ndim == 1 and np.issubdtype(value.dtype, np.floating) and np.unique(value).size > 1


def slices(array: np.ndarray) -> list[tuple[int, list]]:
    """(axis, its slices) of a stored stack of leaves: on the leading axis, and on the trailing one."""
    array = np.asarray(array)
    return [(0, list(array)), (-1, [array[..., i] for i in range(array.shape[-1])])] if array.ndim >= 2 else []


def stacked_in(value, stored: list) -> bool:
    """Whether a leaf is one slice, on the leading or trailing axis, of a stored stack of leaves of
    its shape (jnp.stack([mu, nu]) of a kernel: read by shards, each device reads its block of every
    slice)."""
    value = np.asarray(value)
    return value.ndim >= 1 and any(np.ndim(array) == value.ndim + 1 and any(same(part, value) for part in parts)
                                   for _, array in stored for _, parts in slices(array))


def counter_in_a_small_vector(value, stored: list) -> bool:
    """A counter (a 0-d integer) held in a small integer array of counters packed together (at most
    MAX_BOOKKEEPING numbers: in a larger one any small number stands by chance)."""
    return any(np.issubdtype(array.dtype, np.integer) and 0 < array.size <= MAX_BOOKKEEPING
               and int(value) in np.asarray(array).reshape(-1).tolist() for _, array in stored)


def absent_parts(missing: list, stored: list, files: dict, saved: dict) -> list[str]:
    """The parts of the saved state (of those missing_parts names) that the checkpoint folder holds
    in no form: no leaf's numbers inside a stored array, no counter written as a number anywhere in
    its files or names. A restore cannot have read such a part from the checkpoint."""
    numbers = numbers_in(files) if missing else set()
    absent = []
    for group, belongs in GROUPS:
        if group not in missing:
            continue
        names = [n for n in saved if belongs(n) and not n.endswith("dropout/key/value")]
        found = [(np.ndim(saved[n]) == 0 and np.issubdtype(saved[n].dtype, np.integer) and int(saved[n]) in numbers)
                 or inside(saved[n], stored) for n in names]
        if names and not any(found):
            absent.append(group)
    return absent


_CHECKPOINTS: dict = {}  # seed -> what the grader read in the folder save wrote


def checkpoint(worker, seed: int) -> dict:
    """The folder save wrote (its bytes, sent by the worker), written to a folder of the grader's
    own and read there with the grader's own StandardCheckpointer, once per grading:
    {"error": why it is no Orbax checkpoint the grader reads, or None; "missing": the parts of the
    state after k steps whose values it does not hold}."""
    if seed not in _CHECKPOINTS:
        result = experiment(worker, seed)
        stage(result, "save")
        files = result["folder"] or {}
        saved = own_runs(seed)["saved"]
        error, missing = None, []
        with tempfile.TemporaryDirectory(prefix="ex10-judge-") as folder:
            unpack(files, folder)
            items = item_folders(folder)
            stored, trees = [], []  # a checkpoint may hold its state in several items (a CheckpointManager's Composite)
            if not items:
                shown = ", ".join(sorted(files)[:6]) or "nothing"
                error = (f"save wrote no Orbax checkpoint (the folder holds: {shown}): there is no _METADATA file, which "
                         "every Orbax PyTree checkpoint has. Hint: ocp.StandardCheckpointer().save(path, state) (or a "
                         "CheckpointManager), then wait_until_finished().")
            for item in items:
                try:
                    trees.append(read_tree(item))
                    stored += read_checkpoint_of(trees[-1])
                except Exception as exc:  # a folder Orbax cannot read
                    text = " ".join(str(exc).split())[:300]
                    error = (f"the grader's StandardCheckpointer cannot read the checkpoint in "
                             f"{os.path.relpath(item, folder)} ({type(exc).__name__}: {text}). Hint: save with "
                             "ocp.StandardCheckpointer or a CheckpointManager, and wait for the write to finish.")
                    break
            if error is None:
                missing = missing_parts(stored, saved, orbax_numbers(files))
        _CHECKPOINTS[seed] = {"error": error, "missing": missing, "absent": absent_parts(missing, stored, files, saved),
                              "files": files, "trees": trees,
                              "items": [os.path.relpath(item, folder) for item in items]}
    return _CHECKPOINTS[seed]


def saved_path_target(seed: int) -> dict:
    """The mesh the restore at the path save wrote goes onto: one of the TARGETS whose axes are in the
    other order than the drawn target's, so that the experiment's restore and this one together
    cover both orders."""
    d = draw(seed)
    if tuple(d["target"]["axes"]) == AXES:
        return next(t for t in TARGETS if tuple(t["axes"]) != AXES)
    return [t for t in TARGETS if tuple(t["axes"]) == AXES][seed % 2]


def third_target(seed: int) -> dict:
    """The mesh the grader's checkpoint at a path save never wrote is also restored onto (after mesh
    A): the one of the TARGETS that neither the experiment's restore nor the one at the saved path
    goes onto."""
    taken = (draw(seed)["target"], saved_path_target(seed))
    return next(t for t in TARGETS if t not in taken)


def third_when(seed: int) -> str:
    target = third_target(seed)
    return (f"while restore ran onto a {tuple(target['shape'])} mesh of devices {list(target['devices'])} on the "
            "checkpoint the grader wrote at another path")


def given_answer(worker, seed: int) -> dict | str:
    """The learner's restores of the checkpoint the grader wrote (the learner's own, rewritten with
    given_values), once per grading: at a path save never wrote onto mesh A and onto third_target, and
    at the path the experiment's save wrote onto saved_path_target; or a text saying why the grader
    could not write it."""
    got = checkpoint(worker, seed)
    if "answer" not in got:
        with tempfile.TemporaryDirectory(prefix="ex10-given-") as folder:  # only when a check gets here
            unpack(got["files"], folder)
            given = rewritten(folder, [os.path.join(folder, rel) for rel in got["items"]], got["trees"],
                              own_runs(seed)["saved"], given_values(seed))
        path = experiment(worker, seed).get("path")
        got["answer"] = given if isinstance(given, str) else worker.restore_from(
            draw(seed)["config"], given, path if isinstance(path, str) else None, saved_path_target(seed),
            third_target(seed))
    return got["answer"]


def reads_the_given_checkpoint(worker, seed: int, what: str, placements: bool = False) -> None:
    """Fail `what` unless the learner's restore, given the learner's own checkpoint rewritten by the
    grader with another state's numbers (`rewritten`), hands back that state's parameters and nothing
    of the state saved before: at a path save never wrote, and (with `placements`) at the very path
    save wrote, its folder replaced by the rewritten one. A restore that ignores its path (state kept
    in memory since save, or a part the checkpoint lacks taken from there) hands back the earlier
    numbers at the first; one that keeps a copy for each path it saved, at the second."""
    answer = given_answer(worker, seed)
    hint = ("Hint: read every leaf from the checkpoint at `path` (ocp.StandardCheckpointer().restore(path, template)); "
            "a restarted job has nothing else.")
    if isinstance(answer, str):  # no restore to judge on a checkpoint the grader could not write: no point either
        fail(f"{what} must read the checkpoint at the path it is given, and the grader could not write your "
             f"checkpoint's layout again (with its own Orbax, holding another state's numbers) to see that: {answer}. "
             "Hint: save the state with ocp.StandardCheckpointer (or a CheckpointManager's StandardSave) and nothing "
             "else inside its folder.")
    told = ("the grader wrote your checkpoint again with its own Orbax, in the same layout but holding another state's "
            "numbers, at a path your save never wrote to")
    missing = checkpoint(worker, seed)["missing"]
    held_to_the_rewrite(seed, answer, what, told, hint, (own_runs(seed)["saved"],), lambda count, example: (
        f"restore from there handed back {count} leaves (e.g. {example}) as they were saved before, which that "
        "checkpoint does not hold: they came from somewhere else than the checkpoint (kept in memory since save, or a "
        "copy of the state beside the Orbax checkpoint)."), missing)
    if placements:  # where that restore put the data: the route a restarted job takes
        shards_straight(draw(seed), MESH_A, "while restore ran on the checkpoint the grader wrote at another path",
                        blocks(answer.get("pieces") or [], split_leaves(draw(seed), MESH_A)), answer.get("moves") or [])
        third = answer.get("third")
        if isinstance(third, dict):
            if third["restore"] is not None:
                fail(f"{what} must read the checkpoint at the path it is given: {told}, and restore from there onto a "
                     f"{tuple(third_target(seed)['shape'])} mesh raised: {third['restore']['message']} {hint}")
            target = third_target(seed)
            shards_straight(draw(seed), target, third_when(seed),
                            blocks(third.get("pieces") or [], split_leaves(draw(seed), target)), third.get("moves") or [])
        reads_the_saved_path_again(seed, answer, what, missing)


def held_to_the_rewrite(seed: int, at: dict, what: str, told: str, hint: str, earlier: tuple, kept_words,
                        missing: list) -> None:
    """Fail `what` unless one restore of the grader's rewritten checkpoint (`at`: what the probe
    reported of it) ran and handed back the rewritten state: no leaf as one of the `earlier` states
    had it (where that differs from the rewrite; kept_words(count, example) says so), and every leaf
    the rewrite changed (the floating-point numbers, the dropout key) as the rewrite holds it, in
    the parts of the state the checkpoint holds (`missing`: the groups it lacks, whose values
    restore cannot have read)."""
    if at["restore"] is not None:
        fail(f"{what} must read the checkpoint at the path it is given: {told}, and restore from there raised: "
             f"{at['restore']['message']} {hint}")
    found, saved, other = at["restored"] or {}, own_runs(seed)["saved"], given_values(seed)
    # The dropout key never changes while training: the saved one is the key make_state's fresh Rngs
    # holds, so a restore that did not save the stream (a mistake of its own) hands it back too.
    fresh_key = np.asarray(draw(seed)["config"]["key"], np.uint32)
    kept = [n for n in saved if found.get(n) is not None and found[n]["value"] is not None
            and not (n.endswith("dropout/key/value") and same(saved[n], fresh_key))
            and any(not same(e[n], other[n]) and same(found[n]["value"], e[n]) for e in earlier)]
    if kept and at.get("returned_before"):
        fail(f"{what} must read the checkpoint at the path it is given: {told}, and restore from there handed back the "
             "very objects (model, optimizer or rngs) an earlier restore in the same process had returned, holding "
             f"{len(kept)} leaves (e.g. {show(kept[0])}) as they were saved before, which that checkpoint does not "
             "hold: the earlier result was kept and handed back again, not the checkpoint read. Hint: build new "
             "objects with nnx.eval_shape(make_state) on every call and fill them from the checkpoint at `path`.")
    if kept:
        fail(f"{what} must read the checkpoint at the path it is given: {told}, and "
             f"{kept_words(len(kept), show(kept[0]))} {hint}")
    held = [n for n in saved if not same(saved[n], other[n]) and not in_parts(n, missing)]
    wrong = [n for n in held if found.get(n) is None or found[n]["value"] is None
             or not same(found[n]["value"], other[n])]
    if wrong:
        fail(f"{what} must read the checkpoint at the path it is given: {told}, and restore from there handed back "
             f"{show(wrong[0])} other than that checkpoint holds it. {hint}")


def at_saved_path(answer) -> dict | None:
    """The learner's restore at the path save wrote, from given_answer, if it ran."""
    at = answer.get("at_saved") if isinstance(answer, dict) else None
    return at if isinstance(at, dict) else None


def saved_path_when(seed: int) -> str:
    target = saved_path_target(seed)
    return (f"while restore ran onto a {tuple(target['shape'])} mesh of devices {list(target['devices'])} on the "
            "checkpoint the grader wrote at the path your save wrote")


def reads_the_saved_path_again(seed: int, answer: dict, what: str, missing: list) -> None:
    """Fail `what` unless the learner's restore at the path the experiment's save wrote, after the
    grader replaced that folder with the rewritten checkpoint, hands back the rewritten state (not
    what save had been given there, first or second), its pieces placed as the experiment's."""
    told = ("the grader wrote another state's checkpoint (yours written again in the same layout, holding other "
            "numbers and another dropout key) at the path your save wrote, replacing what was there")
    hint = ("Hint: read the checkpoint at `path` each time restore is called, also at a path this process saved: "
            "its files may have been replaced since (by another job, or a checkpoint copied in).")
    at = at_saved_path(answer)
    if at is None:
        fail(f"{what} must read the checkpoint at the path it is given, and the grader's restore at the path your "
             f"save wrote did not run. {hint}")
    # what the experiment's first and second save were given
    earlier = (own_runs(seed)["saved"], second_values(seed))
    held_to_the_rewrite(seed, at, what, told, hint, earlier, lambda count, example: (
        f"restore returned the state your save had been given: {count} leaves (e.g. {example}) as save had them, "
        "which the checkpoint there no longer holds (a copy kept since save, not the folder read)."), missing)
    shards_straight(draw(seed), saved_path_target(seed), saved_path_when(seed),
                    blocks(at.get("pieces") or [], split_leaves(draw(seed), saved_path_target(seed))),
                    at.get("moves") or [])


def near(got, saved) -> bool:
    """Floating-point values within NEAR_SAVED of the saved ones (relative to their largest)."""
    return np.issubdtype(np.asarray(saved).dtype, np.floating) and is_close(got, saved, rtol=NEAR_SAVED, atol=0.0)


@functools.cache
def made_afresh(seed: int) -> dict:
    """What make_state builds at this draw, leaf by leaf (the state a restore that reads a part from
    nowhere hands back for it)."""
    return values_of(fresh_state(draw(seed)["config"]))


def nothing_from_outside_the_checkpoint(worker, seed: int, what: str) -> None:
    """Fail `what` if an experiment's restore handed back, as it was saved, a part of the state the
    checkpoint holds in no form (absent_parts): it came from somewhere else (a file beside the checkpoint, memory),
    which a job restarted on another machine does not have. The dropout key is not read: it never
    changes while training, so the saved key is also the one make_state's fresh Rngs holds."""
    absent = checkpoint(worker, seed)["absent"]
    saved = own_runs(seed)["saved"]
    lacked = [n for n in saved if not n.endswith("dropout/key/value") and in_parts(n, absent)]
    for which in (SAME, OTHER):
        found = experiment(worker, seed)["runs"][which].get("restored") or {}
        back = [n for n in lacked if found.get(n) is not None and found[n]["value"] is not None
                and (same(found[n]["value"], saved[n])
                     or (near(found[n]["value"], saved[n]) and not same(found[n]["value"], made_afresh(seed)[n])))]
        if back:
            group = next(g for g, belongs in GROUPS if belongs(back[0]))
            fail(f"{what} must read the state from the checkpoint, and the checkpoint your save wrote does not hold "
                 f"{group}, yet restore handed back {show(back[0])} as it was saved"
                 f"{'' if same(found[back[0]]['value'], saved[back[0]]) else ' (to within a few hundred ulps)'}: "
                 "it came from somewhere else than the "
                 "checkpoint (a file beside it, or memory), which a job restarted on another machine does not have. "
                 "Hint: save the whole state in the Orbax checkpoint (pack(model, optimizer, rngs)) and read it all "
                 "from there.")


def read_from_the_checkpoint(worker, seed: int, what: str) -> None:
    """Fail `what` unless save wrote an Orbax checkpoint that the grader's own StandardCheckpointer
    reads, holding the parameters as they were after k steps: what restore reads its shards from,
    and what save waits for. Where restore puts data is seen in the learner's process only; this
    part is the grader's own reading, so a description of a perfect restore from no checkpoint (or
    from one of another state) earns nothing."""
    got = checkpoint(worker, seed)
    if got["error"] is not None:
        fail(f"{what} needs the Orbax checkpoint save wrote, and the grader's own StandardCheckpointer reads none "
             f"(checkpoint_is_an_orbax_folder_holding_the_whole_state fails): {got['error']}")
    if "the parameters" in got["missing"]:
        k = draw(seed)["k"]
        fail(f"{what} needs the Orbax checkpoint save wrote, and the one the grader's own StandardCheckpointer reads "
             f"does not hold the parameters as they were after {k} steps: it is not the state save was given. "
             "Hint: save pack(model, optimizer, rngs) of the objects save is called with.")


@pytest.mark.points(1)
def test_checkpoint_is_an_orbax_folder_holding_the_whole_state(worker, seed):
    """The folder save writes is an Orbax checkpoint the grader's StandardCheckpointer reads, holding the whole state."""
    d = draw(seed)
    got = checkpoint(worker, seed)
    if got["error"] is not None:
        fail(got["error"])
    missing = got["missing"]
    if missing:
        only = ""
        if "Adam's moments" in missing and "the optimizer's step and the schedule's counts" in missing:
            only = (" With no optimizer state, resuming restarts the warmup schedule (its learning rate at step 0 is "
                    "0) and Adam's moments from zero.")
        if "the dropout stream (key and count)" in missing:
            only += " With no RNG state, dropout repeats or changes its masks after resuming."
        if "the BatchNorm statistics" in missing:
            only += (" No BatchNorm statistics: BatchNorm's running mean and variance are state, not parameters "
                     "(nnx.BatchStat).")
        fail(f"the checkpoint, read with the grader's own StandardCheckpointer, does not hold {', '.join(missing)} as "
             f"they were after {d['k']} steps.{only} Hint: save parameters, nnx.state(model, nnx.BatchStat), "
             "nnx.state(optimizer) and nnx.state(rngs).")


@pytest.mark.points(1)
def test_save_returns_after_the_write_is_finished(worker, seed):
    """When save returns, the Orbax checkpoint is complete: the folder holds every file it ends up with."""
    result = experiment(worker, seed)
    stage(result, "save")
    final = {rel: data if isinstance(data, str) else len(data) for rel, data in (result["folder"] or {}).items()}
    if not any(PurePosixPath(rel).name == "_METADATA" for rel in final):
        fail("save wrote no Orbax checkpoint, so there is no asynchronous write to wait for (see "
             "checkpoint_is_an_orbax_folder_holding_the_whole_state). Hint: save with ocp.StandardCheckpointer.")
    read_from_the_checkpoint(worker, seed, "a save that waits for its write")
    at_return = result["at_return"] or {}
    missing = sorted(rel for rel, size in final.items() if at_return.get(rel) != size)
    if missing:
        shown = ", ".join(PurePosixPath(rel).name for rel in missing[:4])
        fail(f"save returned while Orbax was still writing the checkpoint: at that moment {len(missing)} of its "
             f"{len(final)} files were missing or incomplete ({shown}{', ...' if len(missing) > 4 else ''}). A job "
             "stopped then (or a restore started then) finds no checkpoint. Hint: Orbax saves in the background; "
             "wait for the checkpointer (or the manager) to finish, with its wait_until_finished(), before returning.")


@pytest.mark.points(1)
def test_saving_twice_is_an_error_or_an_overwrite(worker, seed):
    """A second save to the same path raises an error saying so, or replaces the first checkpoint whole."""
    ended = saving_twice(worker, seed)
    if ended is not None:
        raise ended


_TWICE: dict = {}  # seed -> what ended saving twice's reading (None: it passed)


def saving_twice(worker, seed: int) -> BaseException | None:
    """Saving twice's reading, once per grading, and what ended it: its check raises that, and
    template_calls runs it for the restores it makes (restored_afresh), whichever check runs first."""
    if seed not in _TWICE:
        try:
            read_saving_twice(worker, seed)
            _TWICE[seed] = None
        except BaseException as exc:
            _TWICE[seed] = exc
    return _TWICE[seed]


def read_saving_twice(worker, seed: int) -> None:
    """Return where a second save to the same path raised an error saying so or replaced the first
    checkpoint whole, else fail saying what it did."""
    result = experiment(worker, seed)
    stage(result, "save", "saving twice")
    first, second = own_runs(seed)["saved"], second_values(seed)
    twice = result["twice"]
    if twice["error"] is not None:
        error = twice["error"]
        if error["outcome"] == "not_attempted":
            raise Verdict("not_attempted", error["message"])
        if error["type"] == "FileExistsError" or error["names_the_path"] or any(
                word in error["text"].lower() for word in SAYS_IT_EXISTS):
            still_the_first(worker, seed, twice, error)
            return
        fail(f"the second save to the same path raised {error['type']}: {error['text']}, which does not say that a "
             "checkpoint is already there. Hint: a second save to one path should fail saying it exists (as "
             "StandardCheckpointer.save does), or replace the checkpoint when you choose to (force=True).")
    stage(twice, "restore", "saving twice")
    result = twice
    got = result["restored"]
    from_first = [n for n in first if n in got and same(got[n], first[n]) and not same(first[n], second[n])]
    from_second = [n for n in second if n in got and same(got[n], second[n]) and not same(first[n], second[n])]
    differing = [n for n in first if not same(first[n], second[n])]
    if len(from_second) == len(differing):
        second_at_the_path(worker, seed, twice)
        return
    if len(from_first) == len(differing):
        fail("the second save to the same path returned without an error, yet restore still reads the first state: "
             "the second state was silently dropped (a CheckpointManager asked to save a step it already has "
             "returns False and writes nothing). Hint: raise an error saying the checkpoint exists, or replace it "
             "(StandardCheckpointer.save(..., force=True); with a CheckpointManager, check what save returns or "
             "delete the step first).")
    fail(f"after two saves to the same path, restore reads a mix: {len(from_first)} leaves from the first state "
         f"(e.g. {show(from_first[0]) if from_first else '-'}) and {len(from_second)} from the second. "
         "Hint: one save writes one checkpoint; raise an error saying it exists, or replace it whole.")


def items_at_path(files: dict, path: str, first_items: list) -> tuple[dict, set]:
    """The checkpoint items a sent folder holds, read with the grader's own StandardCheckpointer:
    ({item (relative to the folder) -> its leaves as {keystr: array}}, the items the path leads to).
    Those are the items under the folder of the path's name (or where a link of that name points: an
    overwrite may swap a link in) where the first save wrote its items under the path (`first_items`),
    else every item of the folder. An item the grader cannot read holds nothing it can count."""
    name = os.path.basename(path.rstrip("/"))
    found, led_to = {}, set()
    with tempfile.TemporaryDirectory(prefix="ex10-at-path-") as folder:
        unpack(files, folder)
        root = os.path.realpath(os.path.join(folder, name)) if name and any(
            PurePosixPath(rel).parts[0] == name for rel in first_items) else None
        for item in item_folders(folder):
            rel = os.path.relpath(item, folder)
            try:
                found[rel] = dict(read_checkpoint_of(read_tree(item)))
            except Exception:  # an item the grader cannot read holds nothing it can count
                continue
            if root is None or os.path.commonpath([root, os.path.realpath(item)]) == root:
                led_to.add(rel)
    return found, led_to


def first_items(worker, seed: int) -> dict:
    """The items the first save wrote (relative to the folder), each as {keystr: array}."""
    got = checkpoint(worker, seed)
    return {rel: dict(read_checkpoint_of(tree)) for rel, tree in zip(got["items"], got["trees"])}


def held_as(value, states: tuple) -> str:
    """What a stored array holds, in words: a leaf of one of the (words, values) states, or other numbers."""
    for words, values in states:
        name = next((n for n in values if same(values[n], value)), None)
        if name is not None:
            return f"{words} {show(name)}"
    return "numbers of neither state there"


def part_of(value, saved: dict) -> str:
    """The leaf of the saved state a stored array holds (its name), or that it holds several packed."""
    name = next((n for n in saved if same(saved[n], value)), None)
    return show(name) if name is not None else "several leaves packed or stacked together"


def paired(before: dict, after: dict) -> dict | None:
    """Which leaf of an item's `after` reading (keystr) a restore reads where `before` had each of its
    leaves: the same name; else the same name but for Flax's Variable wrapper (a state saved as
    nnx.State has ['value'] entries, the same state as pure dicts none); else, with as many leaves of the
    same shapes in the same order, the leaf in the same place of that order (a restore by a template of
    the other structure pairs them so). None where the items are of different layouts."""
    if set(before) == set(after):
        return {key: key for key in before}
    bare = lambda key: re.sub(r"\['value'\]|\.value\b", "", key)
    plain_before, plain_after = {bare(k): k for k in before}, {bare(k): k for k in after}
    if len(plain_before) == len(before) and set(plain_before) == set(plain_after):
        return {k: plain_after[p] for p, k in plain_before.items()}
    if len(before) == len(after) and all(np.shape(before[a]) == np.shape(after[b]) for a, b in zip(before, after)):
        return dict(zip(before, after))
    return None


def changed_in_place(before: dict, after: dict, pairs: dict, expected) -> tuple | None:
    """The first stored array (its pair's keystr, what it held, what its pair in `after` holds) of an item whose
    pair holds other numbers than expected(what `before` held there), or None where every one holds
    them; an array expected() says nothing of (None) is not compared."""
    for key, value in before.items():
        want = expected(value)
        if want is None:
            continue
        got = after.get(pairs.get(key))
        if got is None or not same(got, want):
            return pairs.get(key, key), value, got
    return None


def second_at_the_path(worker, seed: int, twice: dict) -> None:
    """Fail unless, after a second save to the path that raised nothing (and a restore that read the
    second state back), the checkpoint at the path, read from the folder's files with the grader's own
    StandardCheckpointer, holds every part of the second state: a restore answering from a copy kept in
    memory, or from a checkpoint written beside the path (or an overwrite of part of it), reads it back too, while every other reader
    of the path (a restarted job) gets the first state. Where the first save wrote nothing under the
    path itself, the whole folder counts. Then each part must be at its own name (misplaced_second)."""
    files, got = twice.get("folder"), checkpoint(worker, seed)
    path = experiment(worker, seed).get("path")
    if not isinstance(files, dict) or got["error"] is not None or not isinstance(path, str):
        return  # no folder sent, or none the grader reads (checkpoint_is_an_orbax_folder_... says why)
    first = own_runs(seed)["saved"]
    found, led_to = items_at_path(files, path, got["items"])
    stored = [leaf for rel in sorted(led_to) for leaf in found[rel].items()]
    # Every part the second state was given (the counters as orbax_numbers finds them, as for the first save).
    lacking = missing_parts(stored, second_values(seed), orbax_numbers(files))
    if not lacking:
        return misplaced_second(worker, seed, found, led_to, files)
    still = [part for part in lacking if part not in missing_parts(stored, first, orbax_numbers(files))]
    fail("the second save to the same path returned without an error and restore then handed back the second state, "
         f"yet the checkpoint at that path, read with the grader's own StandardCheckpointer, does not hold "
         f"{', '.join(lacking)} as the second save was given them{' (it still holds the first state' + chr(39) + 's)' if still else ''}: "
         "restore read them from somewhere "
         "else than the checkpoint at the path (a copy kept in memory, or a checkpoint written beside it), and any "
         "other reader of the path, such as a restarted job, gets another state. Hint: raise an error saying the "
         "checkpoint exists, or replace it at the path (StandardCheckpointer.save(..., force=True); with a "
         "CheckpointManager, check what save returns or delete the step first).")


def misplaced_second(worker, seed: int, found: dict, led_to: set, files: dict) -> None:
    """Fail unless the items the path leads to hold the second state where a restore reads it. For every
    item the first save wrote, an item there with its leaf names (`paired`) should hold, at each name
    where the first save wrote a part of the first state, that part of the second state (an overwrite in
    place, or a new item in the same layout: a CheckpointManager's next step; an item of one array, one of
    its item's name). Where none does (leaves
    exchanged, or another layout than the names say), or where the first save's item still holds the
    first state beside the one holding the second (two checkpoints at the path), what a job restarted
    after the second save reads decides (`read_as_restarted`)."""
    first, second = own_runs(seed)["saved"], second_values(seed)
    into = in_place_of(first, second)

    def expected(value):  # an array holding none of the first state's values says nothing of the second's
        new = into(value)
        return None if new is value else new

    def alike_to(rel: str, before: dict, j: str) -> bool:
        # An item of one array reads as {"": array}, so it pairs by leaf name with every other such
        # item: a restore finds it by its item's name (its folder's), so it pairs with that name only.
        return paired(before, found[j]) is not None and (
            set(before) != {""} or PurePosixPath(j).name == PurePosixPath(rel).name)

    for rel, before in first_items(worker, seed).items():
        alike = sorted((j for j in led_to if alike_to(rel, before, j)), key=lambda j: j != rel)
        wrong = [changed_in_place(before, found[j], paired(before, found[j]), expected) for j in alike]
        if not alike:  # no item of that layout: the values-anywhere check decides
            continue
        if all(wrong):
            j, (key, value, got) = alike[0], wrong[0]
            back = "nothing" if got is None else held_as(got, (("the second state's", second),
                                                               ("the first state's", first)))
            return read_as_restarted(worker, seed, files, sorted(found), (
                f"the checkpoint at the path, read with the grader's own StandardCheckpointer, holds in {j}/, "
                f"{'at ' + key if key else 'in its one array'} (where the first save wrote {part_of(value, first)}), "
                f"{back} instead of the second state's"))
        if rel in alike and wrong[alike.index(rel)] and not changed_in_place(
                before, found[rel], paired(before, found[rel]), lambda value: value):
            return read_as_restarted(worker, seed, files, sorted(found), (
                f"the path holds two checkpoints, {rel}/ still the first state and {alike[wrong.index(None)]}/ "
                "beside it the second"))


_AFRESH: dict = {}  # seed -> what each restore_afresh of this grading reported (template_calls reads their calls)


def restored_afresh(worker, seed: int, files: dict, rels: list, held: dict) -> dict | None:
    """What the learner's restore, from its file imported afresh (probe restore_afresh, onto mesh A),
    hands back of the folder `files` (its items `rels`) written again by the grader with given_values'
    numbers wherever the `held` state's stood (`rewritten`), at a path its save never wrote; None where
    the grader cannot write that layout again (the checks of the rewrite say so)."""
    with tempfile.TemporaryDirectory(prefix="ex10-twice-") as folder:
        unpack(files, folder)
        items = [os.path.join(folder, rel) for rel in rels]
        try:
            again = rewritten(folder, items, [read_tree(item) for item in items], held, given_values(seed))
        except Exception as exc:  # read_tree's error: an item the grader's Orbax cannot read
            again = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    if isinstance(again, str):
        return None
    at = worker.restore_afresh(draw(seed)["config"], again)
    _AFRESH.setdefault(seed, []).append(at)
    return at


def read_as_restarted(worker, seed: int, files: dict, rels: list, seen: str) -> None:
    """Fail unless the learner's restore, of the folder the second save left (`files`, its items `rels`)
    written again by the grader with given_values' numbers wherever the second state's stood
    (`rewritten`), at a path its save never wrote, from its file imported afresh (as a job restarted after
    the second save reads the path: probe restore_afresh, onto mesh A), hands back that state (held_to_the_rewrite): neither the first
    state, nor the second state's values in other places than its own. `seen` says what the files showed."""
    at = restored_afresh(worker, seed, files, rels, second_values(seed))
    if at is None:
        return
    what = "after a second save to the same path that raised nothing, restore"
    told = (f"{seen}; the grader wrote that folder again at a path your save never wrote, the second state's numbers "
            "replaced by a third state's, and ran your restore from your file imported afresh (as a job restarted "
            "after the second save runs it)")
    hint = ("Hint: save the state you are given as it is, each leaf under its own name, replacing the checkpoint at "
            "the path (StandardCheckpointer.save(path, state, force=True)); or, keeping both, have restore find the "
            "latest from the files (a CheckpointManager's latest_step), not from memory.")
    held_to_the_rewrite(seed, at, what, told, hint, (own_runs(seed)["saved"],), lambda count, example: (
        f"restore from there handed back {count} leaves (e.g. {example}) as the first save had them: every reader of "
        "the path but the process that saved gets the first state."), checkpoint(worker, seed)["missing"])


def still_the_first(worker, seed: int, twice: dict, error: dict) -> None:
    """Fail unless, after a second save to the path was refused (`error`), restore onto mesh A in the
    process that saved still reads the first checkpoint there, and the folder's files as the refusal left
    them (where any byte changed) still hold the whole first state, each item the first save wrote still
    read and every array of it as written, at its own name, and a job restarted then reads it (that folder
    written again with a third state's numbers in the first's places: that third state, restored_afresh): a
    refusal that removed it, still wrote part of the second state (or anything else over the first, two
    leaves exchanged), or made a checkpoint of the second state the current one, is no clear error but a
    damaged checkpoint or a mix."""
    refused = f"the second save to the same path raised {error['type']} (a clear error: {error['text'][:120]})"
    hint = ("Hint: refuse before writing anything (StandardCheckpointer.save raises when the path exists), so that "
            "the checkpoint already there stays as it was.")
    if twice["restore"] is not None:
        if twice["restore"]["outcome"] == "not_attempted":
            raise Verdict("not_attempted", twice["restore"]["message"])
        fail(f"{refused}, and then restore of that path onto the mesh it was saved from raised: "
             f"{twice['restore']['message']} The first checkpoint should still be there, whole. {hint}")
    first, second, got = own_runs(seed)["saved"], second_values(seed), twice["restored"] or {}
    from_second = [n for n in first if n in got and not same(first[n], second[n]) and same(got[n], second[n])]
    if from_second:
        fail(f"{refused}, yet restore of that path then read {len(from_second)} leaves as the refused save was given "
             f"them (e.g. {show(from_second[0])}): that save still wrote part of the second state, and the path now "
             f"holds a mix of two states. {hint}")
    files, before = twice.get("folder"), experiment(worker, seed).get("folder")
    if not isinstance(files, dict) or files == before or checkpoint(worker, seed)["error"] is not None:
        return  # every byte as the first save left it (or nothing the grader reads: another check says why)
    path = experiment(worker, seed).get("path")
    found, led_to = items_at_path(files, path if isinstance(path, str) else "", checkpoint(worker, seed)["items"])
    stored = [leaf for rel in sorted(led_to) for leaf in found[rel].items()]
    lacking = missing_parts(stored, first, orbax_numbers(files))
    if lacking:
        fail(f"{refused}, yet the checkpoint's files at that path, read with the grader's own StandardCheckpointer just "
             "after the refusal, no longer hold "
             f"{', '.join(lacking)} as the first save wrote them: the refused save changed the checkpoint at the path, "
             f"and any other reader of it (a restarted job) gets another state. {hint}")
    # Each item the first save wrote still reads, every array as that save wrote it, at its own name.
    for rel, before in first_items(worker, seed).items():
        if rel not in found:
            fail(f"{refused}, yet in the checkpoint's files at that path just after the refusal, the item {rel}/ the first "
                 "save wrote is gone, or the grader's own StandardCheckpointer no longer reads it: the refused save "
                 f"changed the checkpoint at the path, and any other reader of it (a restarted job) gets another state "
                 f"or none. {hint}")
        wrong = changed_in_place(before, found[rel], paired(before, found[rel]) or {}, lambda value: value)
        if wrong:
            key, value, got = wrong
            back = "nothing" if got is None else held_as(got, (("the second state's", second), ("the first state's", first)))
            fail(f"{refused}, yet the checkpoint's files at that path, read with the grader's own StandardCheckpointer "
                 f"just after the refusal, no longer hold the first state as the first save wrote it: in the item {rel}/, the "
                 f"array {key}, which held {part_of(value, first)}, now holds {back}. The refused save changed the "
                 f"checkpoint at the path, and any other reader of it (a restarted job) gets another state. {hint}")
    # A refusal may also have added a checkpoint beside the first or switched what the path names as
    # current (a pointer, an index): what a job restarted after it reads decides.
    at = restored_afresh(worker, seed, files, sorted(found), first)
    if at is not None:
        told = (f"{refused}, and changed the folder's files; the grader wrote that folder again at a path your save "
                "never wrote, the first state's numbers replaced by a third state's, and ran your restore from your "
                "file imported afresh (as a job restarted after the refusal runs it)")
        held_to_the_rewrite(seed, at, "after a refused second save, restore", told, hint, (second,),
                            lambda count, example: (
            f"restore from there handed back {count} leaves (e.g. {example}) as the refused save was given them: the "
            "refusal still made the second state the one every reader of the path but the process that saved gets."),
                            checkpoint(worker, seed)["missing"])


# --- checks: the technique of the restore ------------------------------------------------------

def calls_of(restore) -> list:
    """make_state's calls recorded in one restore's report (a dict from the worker), else none."""
    calls = restore.get("calls") if isinstance(restore, dict) else None
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def template_calls(worker, seed: int) -> list:
    """make_state's calls in every restore the grader runs: the experiment's (onto mesh A, then onto
    the drawn target, each a restarted job's first), and those in the process that saved (after the
    second save; of the checkpoint the grader wrote, at another path and at the saved one; from the
    file imported afresh there, where saving_twice's reading runs one), where a restore is no
    longer its process's first. A restore that keeps the abstract state it traced on its first
    call (per make_state's code) makes its template on the first restore only."""
    result = experiment(worker, seed)
    stage(result, "save", "restore")
    saving_twice(worker, seed)  # the restores from the file imported afresh that its reading runs
    restarted = "a job restarted after save"
    calls = [dict(call, where=restarted) for run in result["runs"] for call in calls_of(run)]
    if not calls:
        stage(result["runs"][OTHER], "restore")
    saving, afresh = "the process that saved", "your file imported afresh in the process that saved"
    answer = given_answer(worker, seed)
    there = [(saving, result.get("twice"))]
    if isinstance(answer, dict):
        there += [(saving, at) for at in (answer, answer.get("third"), answer.get("at_saved"))]
    there += [(afresh, at) for at in _AFRESH.get(seed, ())]
    # One process numbers its calls: a call two of its restores report is one call, as the later one
    # saw it too (an earlier report was sent before a later restore compiled what that call traced).
    seen: dict = {}
    for where, at in there:
        for call in calls_of(at):
            number = call.get("number")
            if isinstance(number, int) and number in seen:
                first = seen[number]
                first.update(concrete=bool(first.get("concrete") or call.get("concrete")),
                             compiled=bool(first.get("compiled") or call.get("compiled")))
                continue
            calls.append(dict(call, where=where))
            if isinstance(number, int):
                seen[number] = calls[-1]
    return calls


def where_made(calls: list) -> str:
    """Where these calls ran, as a message says it."""
    return " and ".join(dict.fromkeys(f"in {c['where']}" for c in calls))


@pytest.mark.points(1)
def test_template_comes_from_eval_shape(worker, seed):
    """restore builds its template by calling make_state only in traces that are never compiled or run (nnx.eval_shape,
    jax.eval_shape, jax.jit(f).eval_shape, .trace() or .lower(): shapes, no arrays)."""
    calls = template_calls(worker, seed)
    if not calls:
        fail("restore never called make_state: Orbax then has no template saying each leaf's shape, dtype and "
             "sharding, and restore has no objects to put the state in. Hint: "
             "build the template's objects with nnx.eval_shape(make_state).")
    concrete = [c for c in calls if c.get("concrete")]
    if concrete:
        fail(f"make_state ran for real ({len(concrete)} of {len(calls)} calls, {where_made(concrete)}): the template "
             "was built by initialising a real model, which costs the memory of the whole model (on one device, or "
             "on each) before a byte is read, and throws it away. Hint: nnx.eval_shape(make_state) gives the same "
             "objects holding only shapes and dtypes.")
    compiled = [c for c in calls if c.get("compiled")]
    if compiled:
        fail(f"make_state was traced into a program that was then compiled to run ({len(compiled)} of {len(calls)} "
             f"calls, {where_made(compiled)}), e.g. a jit called to build the template: running it still makes every "
             "array of a real model. Hint: only trace it: nnx.eval_shape(make_state) gives the objects with shapes "
             "and dtypes only.")


def split_leaves(d: dict, desc: dict | None = None) -> dict:
    """global shape -> shard shape, for each leaf the mesh `desc` (the drawn target's if None) splits."""
    config, target = d["config"], mesh(desc or d["target"])
    found = {}
    for name, abstract in abstract_leaves(config):
        shape = tuple(abstract.shape)
        spec = spec_for(config, shape)
        if len(spec):
            found[shape] = tuple(NamedSharding(target, spec).shard_shape(shape))
    return found


def blocks(placed: list, split: dict) -> list:
    """The pieces that may be the split arrays' data (`split`: their shapes -> shard shapes on the
    mesh): of two dims; of three, a stack of such blocks (leaves stacked on a leading axis, or on a
    trailing one where that makes a shard's shape), one piece per block; and of one dim when copied
    from another device (a block flattened for the move)."""
    shards = set(split.values())
    found = []
    for p in placed:
        shape = tuple(p["shape"])
        if len(shape) == 2 or (len(shape) == 1 and p["from_device"] and p["device"] is not None):
            found.append(p)
        elif len(shape) == 3 and min(shape) > 0:
            block, k = (shape[:2], shape[2]) if shape[:2] in shards and shape[1:] not in shards else (shape[1:], shape[0])
            size = p.get("backing_size")
            found += [dict(p, shape=block, backing=None if size is None else block,
                           backing_size=None if size is None else size // k)] * k
    return found


def pieces(worker, seed: int, which: int = OTHER) -> tuple[dict, list]:
    """(the draw, the pieces of one restore of the experiment that may be the split arrays' data: blocks)."""
    run = run_of(worker, seed, which, "restore")
    d = draw(seed)
    return d, blocks(run["pieces"], split_leaves(d, d["target"] if which == OTHER else MESH_A))


def restores(worker, seed: int):
    """(mesh description, how a message says when, pieces placed) of each restore of the experiment:
    onto the drawn target, then onto mesh A, the mesh the checkpoint was saved from (the same
    technique on the same mesh: a restore that reads whole arrays there shows only there)."""
    d, placed = pieces(worker, seed)
    yield d["target"], "while restore ran", placed
    _, placed = pieces(worker, seed, SAME)
    yield MESH_A, "while restore ran onto the mesh the checkpoint was saved from", placed


def moves_of(worker, seed: int, which: int) -> list:
    """The collectives of the programs compiled while one restore of the experiment ran."""
    return run_of(worker, seed, which, "restore").get("moves") or []


def whole_of(shape: tuple, split: dict) -> tuple | None:
    """The split array a piece of this shape can be a block of (under any sharding), if any."""
    for whole in split:
        if len(whole) == len(shape) and all(n > 0 and w % n == 0 for n, w in zip(shape, whole)):
            return whole
    return None


def _shapes(items) -> str:
    return ", ".join(str(tuple(s)) for s in sorted(set(map(tuple, items))))


FETCHED = "jax.device_get, np.asarray or np.array of a restored array"
WHOLE_ON_A_DEVICE = ("a template without shardings (or with a single device's) makes Orbax restore every array "
                     "whole onto one device, which on a real model is more than a device holds")


def shards_straight(d: dict, desc: dict, when: str, placed: list, moves=()) -> None:
    """Fail unless the pieces placed during one restore onto the mesh `desc` are each device's own
    shards, read as shards (not whole, not from other devices, not cut from host arrays), and no
    program restore ran (`moves`: the collectives of each program compiled meanwhile) moved them
    between devices."""
    flat = [p for p in placed if len(p["shape"]) != 2]  # copied between devices flattened (pieces)
    placed = [p for p in placed if len(p["shape"]) == 2]
    everything = placed
    # arrays Orbax read (or restore copied) whole onto the host; a shard taken out is judged below
    host = [p for p in placed if p["device"] is None and not p.get("shard_read")]
    placed = [p for p in placed if p["device"] is not None]
    split = split_leaves(d, desc)
    devices = set(desc["devices"])
    ids = sorted(devices)
    template = ("Hint: build the template with nnx.eval_shape(make_state) and give each leaf "
                "jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)); Orbax then reads each "
                "shard from the checkpoint straight onto its device.")
    whole = [p for p in placed if tuple(p["shape"]) in split]
    if whole:
        p = whole[0]
        fail(f"{when}, the whole {tuple(p['shape'])} array went to device {p['device']}: "
             f"{WHOLE_ON_A_DEVICE}. {template}")
    outside = sorted({p["device"] for p in placed if p["device"] not in devices})
    if outside:
        shapes = _shapes(p["shape"] for p in placed if p["device"] not in devices)
        fail(f"{when}, pieces of the split arrays ({shapes}) went to devices {outside}, which are not in "
             f"the mesh restore was given (devices {ids}): the checkpoint was read onto the devices it was saved "
             f"from, as happens when the template carries no shardings, and then moved. {template}")
    # The split arrays' data copied from a device (a shard, a whole array, or a shard flattened): not
    # another value a restore places for its own use (a batch for a smoke test of the restored model).
    state = set(split.values()) | set(split)
    sizes = {int(np.prod(shape)) for shape in split.values()}
    moved = [p for p in placed if p["from_device"] and tuple(p["shape"]) in state] + [
        p for p in flat if p["from_device"] and int(np.prod(p["shape"])) in sizes]
    if moved:
        fail(f"{when}, {len(moved)} pieces of the split arrays were copied from one device to another "
             f"(shapes {_shapes(p['shape'] for p in moved)}): the arrays were restored somewhere else first and "
             f"moved afterwards (a jax.device_put after restoring). {template}")
    # Collectives that carry the state (CARRYING): the shards were read elsewhere (onto the other axis,
    # or whole) and a compiled program moved them.
    moves = [m for m in moves if m["op"].startswith(CARRYING) or tuple(m["shape"]) in state]
    moved_numbers = sum(int(np.prod(m["shape"])) for m in moves)
    if split and moved_numbers >= max(int(np.prod(shard)) for shard in split.values()):
        ops = sorted({m["op"] for m in moves})
        fail(f"{when}, compiled programs moved data between devices ({', '.join(ops)}: "
             f"{sum(int(np.prod(m['shape'])) for m in moves)} numbers in all, of shapes "
             f"{_shapes(m['shape'] for m in moves)[:200]}): the shards "
             f"were read onto other devices, or whole, and moved afterwards (a jitted reshard after restoring). {template}")
    # A piece cut from a split array whole on the host, or a shard cut from a host array holding at least a
    # whole split array's numbers (a buffer of the state): not a piece of a smaller host array a restore
    # places for its own use (a smoke test's batch).
    cut = [p for p in placed if p["backing_size"] is not None and p["backing_size"] > int(np.prod(p["shape"]))
           and (tuple(p["backing"] or ()) in split or (tuple(p["shape"]) in set(split.values()) and p["backing_size"]
                                                       >= min(int(np.prod(whole)) for whole in split)))]
    if cut:
        p = cut[0]
        fail(f"{when}, the pieces sent to the devices were cut from larger host arrays (a "
             f"{tuple(p['shape'])} piece of a {tuple(p['backing'])} array went to device {p['device']}): the arrays "
             f"were read whole onto the host and then split (host arrays, then jax.device_put). {template}")
    # A split array copied whole onto the host and, after that, shards of split arrays placed on the
    # devices again: they came from the host copy (restore_never_holds_a_whole_array judges the copy).
    fetched = next((i for i, p in enumerate(everything) if p.get("fetched") and tuple(p["shape"]) in split), None)
    if fetched is not None and any(p["device"] is not None and tuple(p["shape"]) in set(split.values())
                                   for p in everything[fetched + 1:]):
        fail(f"{when}, the whole {tuple(everything[fetched]['shape'])} array was copied from the devices onto the host "
             f"({FETCHED}), and shards were placed on the devices after that, from the host: the whole model passes "
             "through host memory. Hint: return the arrays Orbax restored with the sharded template as they are; "
             "each device then only ever holds its shard.")
    # The same shard by shard: shards of split arrays copied from the devices onto the host (np.asarray
    # of shard.data), and shards placed on the devices again after that: the restored arrays were
    # taken apart on the host and placed again.
    shard_shapes = set(split.values())
    first = next((i for i, p in enumerate(everything) if tuple(p["shape"]) in shard_shapes and (
        p.get("shard_read") or (p.get("fetched") and tuple(p["shape"]) not in split))), None)
    if first is not None and any(p["device"] is not None and tuple(p["shape"]) in shard_shapes
                                 for p in everything[first + 1:]):
        taken = _shapes(p["shape"] for p in everything if p.get("fetched") or p.get("shard_read"))
        fail(f"{when}, shards of the restored arrays were copied from the devices onto the host (shard.data, "
             f"x.addressable_data(i) or DLPack, of shapes {taken}), and shards were placed on the devices again after "
             "that, from the host: the model passes through host memory. Hint: return the arrays Orbax restored with "
             "the sharded template as they are.")
    read_whole = [p for p in host if tuple(p["shape"]) in split and not p.get("fetched")]
    if read_whole and read_whole[0].get("tensorstore"):
        fail(f"{when}, the whole {tuple(read_whole[0]['shape'])} array was read onto the host with TensorStore "
             "(the checkpoint's files opened outside Orbax), and the devices got their shards from there: the whole "
             f"model passes through host memory. {template}")
    if read_whole:
        fail(f"{when}, Orbax read the whole {tuple(read_whole[0]['shape'])} array onto the host (a template leaf that is "
             "a NumPy array, not a sharded jax.ShapeDtypeStruct), and the devices got their shards from there: the "
             f"whole model passes through host memory. {template}")
    wanted = set(split.values())
    # Blocks of the split arrays in another layout (a value a restore places for its own use, a smoke
    # test's batch, is no block of theirs; nor, where every device got its shards, is a replicated
    # stack of small leaves that happens to divide one): the arrays read as they were saved.
    other = [p for p in placed if tuple(p["shape"]) not in wanted and whole_of(tuple(p["shape"]), split) is not None]
    per_shard = {shape: sum(1 for _, a in abstract_leaves(d["config"]) if tuple(a.shape) == glob)
                 for glob, shape in split.items()}
    for shape, leaves in per_shard.items():
        for device in ids:
            got = sum(1 for p in placed if tuple(p["shape"]) == shape and p["device"] == device)
            if got < leaves and other:
                fail(f"{when}, pieces of shape {_shapes(p['shape'] for p in other)} were placed, where this mesh "
                     f"splits the arrays into {_shapes(wanted)} shards: the data was read in another layout than the "
                     f"target's (the one it was saved in). {template}")
            if got < leaves:
                fail(f"{when}, device {device} received {got} shards of shape {shape}; the "
                     f"{leaves} split arrays of that shape (a kernel and its two Adam moments) each have one "
                     f"there. Restore must read the checkpoint onto the mesh it is given, not hand back arrays "
                     f"kept from before. {template}")


# The technique of the restore is half of the exercise: Orbax without a sharded template, or the
# numbers without Orbax, get at most half of its points (everything else adds up to 11).
@pytest.mark.points(11)
def test_restore_reads_each_shard_straight_onto_its_device(worker, seed, note):
    """While restore runs, each device of the target mesh receives only its own shards, read as shards from the checkpoint."""
    d, placed = pieces(worker, seed)
    on = [p for p in placed if p["device"] is not None]
    note(f"while restore ran: {len(on)} pieces of the split arrays placed, of shapes "
         f"{_shapes(p['shape'] for p in on) or 'none'}, on devices {sorted({p['device'] for p in on})}")
    for (desc, when, placed), which in zip(restores(worker, seed), (OTHER, SAME)):
        shards_straight(d, desc, when, placed, moves_of(worker, seed, which))
    read_from_the_checkpoint(worker, seed, "a restore that reads each shard from the checkpoint")
    nothing_from_outside_the_checkpoint(worker, seed, "a restore that reads each shard from the checkpoint")
    reads_the_given_checkpoint(worker, seed, "a restore that reads each shard from the checkpoint", placements=True)


@pytest.mark.points(1)
def test_restore_never_holds_a_whole_array(worker, seed):
    """No split array is ever whole on one device or on the host while restore runs."""
    d = draw(seed)
    for (desc, when, placed), which in zip(restores(worker, seed), (OTHER, SAME)):
        whole_arrays(d, desc, when, placed, moves_of(worker, seed, which))
    read_from_the_checkpoint(worker, seed, "a restore that reads only each device's shards from the checkpoint")
    answer = given_answer(worker, seed)
    # The restores of the grader's checkpoint: at another path (onto mesh A, then the third target),
    # and at the path save wrote (onto a mesh with the axes in the other order). Where the learner's
    # checkpoint records no sharding for a leaf (or one of devices the grader's process lacks), the
    # rewrite writes it from the host, and a template without shardings makes Orbax read it whole onto
    # the host where it read the learner's onto the devices it was saved from (the experiment's restores
    # judge that template). Here only what reached the devices, and whole copies restore made, count.
    given = [(MESH_A, "while restore ran on the checkpoint the grader wrote at another path",
              answer if isinstance(answer, dict) else None),
             (third_target(seed), third_when(seed), answer.get("third") if isinstance(answer, dict) else None),
             (saved_path_target(seed), saved_path_when(seed), at_saved_path(answer))]
    for target, when, at in given:
        if at is not None and at.get("restore") is None:
            whole_arrays(d, target, when,
                         [p for p in blocks(at.get("pieces") or [], split_leaves(d, target))
                          if len(p["shape"]) == 2
                          and (p["device"] is not None or p.get("fetched"))], at.get("moves") or [])


def whole_arrays(d: dict, desc: dict, when: str, placed: list, moves=()) -> None:
    """Fail if a split array was whole on one device or on the host during one restore onto `desc`
    (placed there, or gathered whole by a program restore ran: `moves`)."""
    split = split_leaves(d, desc)
    gathered = [m for m in moves if m["op"].startswith("all-gather") and tuple(m["shape"]) in split]
    if gathered:
        fail(f"{when}, a compiled program gathered the whole {tuple(gathered[0]['shape'])} array onto every device "
             "(an all-gather: the array replicated), which on a real model is more than a device holds. Hint: give "
             "each leaf of the template its target sharding, and return what Orbax restored as it is.")
    for p in sorted(placed, key=lambda p: p["device"] is None):  # what reached a device first
        if p.get("shard_read"):  # one shard taken out: never a whole array
            continue
        shape = tuple(p["shape"])
        if p["device"] is None:  # an array Orbax read whole onto the host, or copied there whole
            if shape in split and p.get("fetched"):
                fail(f"{when}, the whole {shape} array was on the host: it was copied whole from the devices "
                     f"({FETCHED}), which needs the whole model in host memory at once. Hint: keep the arrays "
                     "Orbax restores where it put them; each device then only ever holds its shard.")
            if shape in split and p.get("tensorstore"):
                fail(f"{when}, the whole {shape} array was on the host: it was read whole with TensorStore (the "
                     "checkpoint's files opened outside Orbax), which needs the whole model in host memory at once. "
                     "Hint: restore with Orbax and a template whose leaves are jax.ShapeDtypeStruct(leaf.shape, "
                     "leaf.dtype, sharding=shardings(leaf)); Orbax then reads only each device's shard.")
            if shape in split:
                fail(f"{when}, the whole {shape} array was on the host: Orbax read it whole (a template leaf that "
                     "is a NumPy array), which needs the whole model in host memory at once. Hint: give each leaf "
                     "of the template jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)); "
                     "Orbax then reads only each device's shard.")
            continue
        if shape in split:
            fail(f"{when}, the whole {shape} array went to device {p['device']}: {WHOLE_ON_A_DEVICE}. "
                 "Hint: give each leaf of the template jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, "
                 "sharding=shardings(leaf)).")
        whole = whole_of(shape, split)
        if whole and p["backing_size"] is not None and p["backing_size"] >= int(np.prod(whole)):
            fail(f"{when}, the whole {whole} array was on the host (the {shape} piece sent to device "
                 f"{p['device']} is a slice of it): restoring host arrays and placing them afterwards needs the "
                 "whole model in host memory at once. Hint: give each leaf of the template its sharding; Orbax "
                 "then reads only each device's shard.")
