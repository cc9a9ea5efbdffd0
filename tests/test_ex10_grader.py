"""Exercise 10's wrong solutions, beyond the check each declares (tests/test_wrong_solutions.py):
what else they lose and what they keep; the README's claim for the chapter's own code; the
reference on every target mesh the grader draws; and the facts of JAX and Orbax the grader's
probes and messages rest on, proven on the installed libraries."""

import re

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from grading import ROOT, TEST_SEED, declared, grade, technique_free_params
from graders.exercises.ex10_orbax_resume import checks as ex10

EX = "ex10"
NUMBERS = {"resumed_on_the_same_mesh_equals_uninterrupted", "resumed_on_another_mesh_matches_uninterrupted",
           "step_and_schedule_continue", "batchnorm_statistics_continue", "dropout_stream_continues",
           "restored_leaves_have_the_requested_shardings", "saving_twice_is_an_error_or_an_overwrite"}
ORBAX = {"checkpoint_is_an_orbax_folder_holding_the_whole_state", "save_returns_after_the_write_is_finished"}
STRAIGHT_INTO_SHARDS = "restore_reads_each_shard_straight_onto_its_device"
SHARDED_RESTORE = {STRAIGHT_INTO_SHARDS, "restore_never_holds_a_whole_array"}


@pytest.mark.parametrize("case", technique_free_params(EX))
def test_right_numbers_without_the_technique_keep_the_numeric_points(corpus, case):
    # ... and at most half of all points (tests/test_wrong_solutions.py).
    lost = corpus(EX)[case].lost(EX)
    assert not NUMBERS & set(lost), f"{case}: its numbers are right, yet it lost {sorted(NUMBERS & set(lost))}"
    assert STRAIGHT_INTO_SHARDS in lost, (case, sorted(lost))


def test_numbers_alone_are_at_most_half_of_the_points():
    points = declared(EX)
    assert sum(points[n] for n in NUMBERS) <= sum(points.values()) / 2


def test_a_restore_straight_into_the_shards_is_worth_half_of_the_points_by_itself():
    # Orbax without a sharded template may lose that check alone (whether a whole array also passes
    # through the host depends on the meshes): it must be half.
    points = declared(EX)
    assert points[STRAIGHT_INTO_SHARDS] >= sum(points.values()) / 2


def test_the_state_mistakes_keep_the_points_of_the_restore(corpus):
    # A checkpoint missing part of the state is still an Orbax checkpoint, written before save
    # returns and restored into its shards; the folder check names the part that is missing.
    for case, missing in (("new_rng_seed", "the dropout stream"), ("rng_key_without_count", "the dropout stream"),
                          ("step_not_saved", None)):
        lost = corpus(EX)[case].lost(EX)
        kept = SHARDED_RESTORE | {"template_comes_from_eval_shape", "save_returns_after_the_write_is_finished"}
        assert not kept & set(lost), (case, sorted(lost))
        folder = "checkpoint_is_an_orbax_folder_holding_the_whole_state"
        assert (missing in lost[folder]) if missing else folder not in lost, (case, lost.get(folder))


@pytest.mark.parametrize(("case", "check"), [
    ("save_returns_before_the_write", "save_returns_after_the_write_is_finished"),
    ("manager_drops_a_second_save", "saving_twice_is_an_error_or_an_overwrite"),
    ("second_save_unclear_error", "saving_twice_is_an_error_or_an_overwrite"),
    ("template_from_a_real_model", "template_comes_from_eval_shape"),
    ("template_made_by_jit", "template_comes_from_eval_shape"),
])
def test_a_narrow_mistake_loses_only_its_check(corpus, case, check):
    lost = corpus(EX)[case].lost(EX)
    assert set(lost) == {check}, (case, lost)


def test_device_put_replicated_is_named_wherever_restore_is_needed(corpus):
    lost = corpus(EX)["device_put_replicated"].lost(EX)
    needs_restore = set(declared(EX)) - ORBAX - {"saving_twice_is_an_error_or_an_overwrite",
                                                 "template_comes_from_eval_shape"}
    assert needs_restore <= set(lost), sorted(lost)
    assert all("device_put_replicated" in lost[check] for check in needs_restore)


def test_only_parameters_saved_is_named_as_such(corpus):
    lost = corpus(EX)["only_parameters_saved"].lost(EX)
    assert "only the parameters were saved" in lost["step_and_schedule_continue"]
    assert "restarts" in lost["step_and_schedule_continue"]


def test_readme_states_what_the_chapters_own_code_scores(corpus):
    ex = corpus(EX)["chapter_code_fitted"].exercise(EX)
    text = " ".join((ROOT / "README.md").read_text().split())
    found = re.search(r"\*\*Exercise 10\*\*.*?The chapter's own code, fitted to the stubs .*? scores (\d+)/(\d+) here",
                      text)
    assert found, "README's Differences from the chapter has no score for Exercise 10's chapter code"
    assert (int(found.group(1)), int(found.group(2))) == (ex["score"], ex["max_score"])


def test_the_reference_gets_full_marks_on_every_target_mesh():
    # The tests' own seed draws one target mesh; a seed for each of the others.
    drawn = ex10.draw(TEST_SEED)["target"]
    for target in ex10.TARGETS:
        if target == drawn:
            continue
        seed = next(s for s in range(TEST_SEED + 1, TEST_SEED + 1000) if ex10.draw(s)["target"] == target)
        run = grade(ROOT / "reference", [EX], "--seed", str(seed))
        assert run.exercise(EX)["status"] == "passed", (seed, target, run.lost(EX))


def test_the_restore_at_the_saved_path_goes_onto_the_other_axis_order():
    # The experiment restores onto the drawn target; the restore at the path save wrote goes onto one of
    # the other targets whose axes are in the other order, so that every grading sees both orders.
    for seed in (TEST_SEED, 7, 31031, *range(1, 7)):
        drawn, other = ex10.draw(seed)["target"], ex10.saved_path_target(seed)
        assert other in ex10.TARGETS and tuple(other["axes"]) != tuple(drawn["axes"]), seed


# --- what the probes and messages rest on -----------------------------------------------------

def _mesh():
    return jax.make_mesh((2, 4), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)


def test_placements_see_a_host_array_that_device_put_splits():
    # jax.device_put of a whole host array hands batched_device_put slices of it: the probe reads
    # the whole array behind each piece (restore_never_holds_a_whole_array's "on the host").
    from graders.exercises.ex10_orbax_resume.probes import Placements

    whole = np.arange(8 * 12, dtype=np.float32).reshape(8, 12)
    with Placements() as placed:
        jax.device_put(whole, NamedSharding(_mesh(), P(None, "model")))
    assert placed.pieces, "jax.device_put no longer goes through pxla.batched_device_put"
    assert {tuple(p["shape"]) for p in placed.pieces} == {(8, 3)}
    assert all(p["backing_size"] == whole.size and not p["from_device"] for p in placed.pieces)


def test_placements_see_every_shard_orbax_reads_and_nothing_whole(tmp_path):
    import orbax.checkpoint as ocp

    from graders.exercises.ex10_orbax_resume.probes import Placements

    mesh = _mesh()
    split = NamedSharding(mesh, P(None, "model"))
    value = jax.device_put(np.arange(8 * 12, dtype=np.float32).reshape(8, 12), split)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(tmp_path / "c", {"w": value})
    checkpointer.wait_until_finished()
    target = {"w": jax.ShapeDtypeStruct((8, 12), np.float32, sharding=split)}
    with Placements() as placed:
        got = checkpointer.restore(tmp_path / "c", target)
    assert np.array_equal(np.asarray(got["w"]), np.asarray(value))
    assert sorted(p["device"] for p in placed.pieces) == list(range(8))
    assert all(tuple(p["shape"]) == (8, 3) and p["backing_size"] == 24 for p in placed.pieces)


def test_placements_see_an_array_read_whole_with_tensorstore_outside_orbax():
    # The library Orbax reads with, opened by restore's own code: a read of the whole domain (by
    # .read() or np.asarray) is a whole array on the host. Orbax's own reads through it are not
    # recorded here (the test above: only the shards it places).
    import tensorstore as ts

    from graders.exercises.ex10_orbax_resume.probes import Placements

    store = ts.open({"driver": "array", "array": np.ones((8, 12), np.float32), "dtype": "float32"}).result()
    with Placements() as placed:
        store.read().result()
        np.asarray(store[:, :3])
    assert [(p["shape"], p["device"], p.get("tensorstore")) for p in placed.pieces] == [
        ((8, 12), None, True), ((8, 3), None, True)]
    assert store.read().result().shape == (8, 12) and np.asarray(store).shape == (8, 12)  # put back, bound
    assert placed.pieces[-1]["shape"] == (8, 3)  # and no longer recorded


def test_placements_see_the_collectives_of_a_program_compiled_while_restore_runs():
    # A jitted reshard moves shards between devices inside XLA (not through batched_device_put):
    # the probe reads the collectives of each program compiled while it is on; a program that
    # keeps every shard where it is holds none.
    from graders.exercises.ex10_orbax_resume.probes import Placements

    mesh = _mesh()
    value = jax.device_put(np.arange(8 * 12, dtype=np.float32).reshape(8, 12), NamedSharding(mesh, P(None, "model")))
    with Placements() as placed:
        jax.jit(lambda a: a * 2.0)(value).block_until_ready()
    assert placed.moves == []
    gather = jax.jit(lambda a: a + 1.0, out_shardings=NamedSharding(mesh, P()))
    gather(value).block_until_ready()  # compiled before (at import, say): compiled again while on, and read
    with Placements() as placed:
        gather(value).block_until_ready()
    assert {m["op"] for m in placed.moves} == {"all-gather"}
    assert any(tuple(m["shape"]) == (8, 12) for m in placed.moves)


def test_placements_see_a_shard_taken_out_to_the_host():
    # NumPy copies a single-device array through the buffer protocol, past ArrayImpl._value: a shard
    # taken out (shard.data) is recorded as such, on no device, and a whole copy still as fetched.
    from graders.exercises.ex10_orbax_resume.probes import Placements

    value = jax.device_put(np.ones((8, 12), np.float32), NamedSharding(_mesh(), P(None, "model")))
    with Placements() as placed:
        parts = [np.asarray(shard.data) for shard in value.addressable_shards]
    assert len(parts) == 8 and all(p.get("shard_read") and p["device"] is None and tuple(p["shape"]) == (8, 3)
                                   for p in placed.pieces) and len(placed.pieces) == 8
    # x.addressable_data(i) copied by the buffer protocol, and an array handed out through DLPack.
    with Placements() as placed:
        np.asarray(value.addressable_data(3))
    assert [(p["shape"], p.get("shard_read")) for p in placed.pieces] == [((8, 3), True)]
    one = jax.device_put(np.ones((2, 3), np.float32), jax.devices()[0])
    with Placements() as placed:
        np.from_dlpack(one)
    assert placed.pieces and {(p["shape"], p.get("shard_read")) for p in placed.pieces} == {((2, 3), True)}


def test_make_state_calls_are_told_apart():
    # Traced or lowered only (never compiled), traced then compiled (and run), run for real: told
    # apart by what happened to the program, whatever function traced it.
    from flax import nnx

    from graders.exercises.ex10_orbax_resume.probes import Lowerings, recorded_factory

    config = ex10.draw(TEST_SEED)["config"]
    calls: list = []
    make_state = recorded_factory(config, calls)

    def build():  # a new function each time: JAX keeps the trace of one it has traced
        return lambda: nnx.split(make_state())[1]

    with Lowerings(calls):
        nnx.eval_shape(make_state)
        jax.eval_shape(build())
        jax.jit(build()).eval_shape()
        jax.jit(build()).trace()
        jax.make_jaxpr(build(), return_shape=True)()
        nnx.jit(make_state)()
        jax.jit(build()).trace().lower()
        jax.jit(build()).lower().out_info
        jax.jit(build()).lower().compile()
        make_state()
    assert [(c["concrete"], c["compiled"]) for c in calls] == [(False, False)] * 5 + [(False, True)] + [
        (False, False)] * 2 + [(False, True), (True, False)]


def test_orbax_refuses_a_second_save_and_a_manager_skips_a_step_it_has(tmp_path):
    # What saving_twice_is_an_error_or_an_overwrite's messages say of Orbax.
    import orbax.checkpoint as ocp

    tree = {"w": np.ones(3, np.float32)}
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(tmp_path / "c", tree)
    checkpointer.wait_until_finished()
    with pytest.raises(ValueError, match="already exists"):
        checkpointer.save(tmp_path / "c", {"w": np.zeros(3, np.float32)})
    checkpointer.save(tmp_path / "c", {"w": np.zeros(3, np.float32)}, force=True)
    checkpointer.wait_until_finished()
    assert np.array_equal(checkpointer.restore(tmp_path / "c")["w"], np.zeros(3))
    with ocp.CheckpointManager(tmp_path / "m") as manager:
        assert manager.save(1, args=ocp.args.StandardSave(tree))
        manager.wait_until_finished()
        assert manager.save(1, args=ocp.args.StandardSave({"w": np.zeros(3, np.float32)})) is False
        manager.wait_until_finished()
        assert np.array_equal(manager.restore(1, args=ocp.args.StandardRestore(tree))["w"], np.ones(3))


def test_device_put_replicated_is_gone():
    with pytest.raises(AttributeError, match="device_put_replicated"):
        jax.device_put_replicated({"w": np.ones(3)}, jax.devices())


def test_symlinks_inside_the_checkpoint_travel_and_none_leads_out(tmp_path):
    # A "latest" pointer travels as its target and is made again on the other side; a link whose
    # target leaves the folder (absolute, by "..", or through another link) is neither sent nor made.
    import os

    from graders.exercises.ex10_orbax_resume.probes import listing, read_folder, unpack

    sent = tmp_path / "sent"
    (sent / "checkpoint" / "step_3").mkdir(parents=True)
    (sent / "checkpoint" / "step_3" / "_METADATA").write_bytes(b"{}")
    os.symlink("step_3", sent / "checkpoint" / "latest")
    os.symlink("/etc", sent / "checkpoint" / "absolute")
    os.symlink("../..", sent / "checkpoint" / "up")
    os.symlink(str(sent / "checkpoint" / "step_3"), sent / "checkpoint" / "latest_absolute")  # inside: relative
    os.symlink(str(tmp_path), sent / "checkpoint" / "outside")
    files = read_folder(str(sent), listing(str(sent)))
    assert files == {"checkpoint/latest": "step_3", "checkpoint/latest_absolute": "step_3",
                     "checkpoint/step_3/_METADATA": b"{}"}
    files.update({"checkpoint/a/b/s": "..", "checkpoint/t": "a/b/s/../../../x", "checkpoint/abs": "/etc",
                  "checkpoint/u": "../../x"})
    got = tmp_path / "got"
    unpack(files, str(got))
    assert (got / "checkpoint" / "latest" / "_METADATA").read_bytes() == b"{}"
    assert os.path.islink(got / "checkpoint" / "a" / "b" / "s")
    for name in ("t", "abs", "u"):
        assert not os.path.lexists(got / "checkpoint" / name), name


def test_a_checkpoint_the_grader_cannot_write_again_is_said_not_skipped(tmp_path):
    # reads_the_given_checkpoint fails with this text (no module in the corpora has such a layout).
    item = tmp_path / "checkpoint"
    item.mkdir()
    (item / "_METADATA").write_bytes(b"not json")
    got = ex10.rewritten(str(tmp_path), [str(item)], [{"w": np.ones(2, np.float32)}],
                         {"w": np.ones(2, np.float32)}, {"w": np.zeros(2, np.float32)})
    assert isinstance(got, str) and got.startswith("checkpoint: JSONDecodeError"), got




def test_the_rewrite_changes_the_numbers_and_no_name_or_file_the_layout_keeps_beside_them(tmp_path):
    # A layout may file its checkpoint under the step anywhere (a folder's name, a pointer, an index,
    # a marker): the rewrite writes other floating-point numbers into the items and leaves every
    # counter, name and file outside them as the learner's save wrote them, so the layout stays one
    # consistent checkpoint.
    import orbax.checkpoint as ocp

    from graders.exercises.ex10_orbax_resume.probes import listing, read_folder

    item = tmp_path / "checkpoint" / "step_5" / "state"
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(item, {"step": np.asarray(5, np.int32), "w": np.ones(3, np.float32)})
    checkpointer.wait_until_finished()
    beside = {"checkpoint/LATEST": b"step_5", "checkpoint/index.json": b'{"latest": 5, "5": "step_5"}',
              "checkpoint/step_5.done": b""}
    for rel, data in beside.items():
        (tmp_path / rel).write_bytes(data)
    before = read_folder(str(tmp_path), listing(str(tmp_path)))
    saved = {"step": np.asarray(5, np.int32), "w": np.ones(3, np.float32)}
    given = {"step": np.asarray(5, np.int32), "w": np.full(3, 2.5, np.float32)}
    got = ex10.rewritten(str(tmp_path), [str(item)], [ex10.read_tree(str(item))], saved, given)
    assert not isinstance(got, str), got
    outside = lambda files: sorted(rel for rel in files if not rel.startswith("checkpoint/step_5/state/"))
    assert outside(got) == outside(before) and any(rel.startswith("checkpoint/step_5/state/") for rel in got)
    assert all(got[rel] == data for rel, data in beside.items())
    again = ex10.read_tree(str(item))
    assert int(again["step"]) == 5 and np.array_equal(again["w"], given["w"])


def test_where_jax_has_made_its_devices_the_restores_import_the_learners_file_afresh_here(tmp_path):
    # A process forked once JAX has made its devices cannot use them: before_solution forks none
    # there, and the experiment's restores run from the learner's file imported afresh in this
    # process instead, where nothing its first import kept is seen (and the failure says so).
    import importlib.util

    from graders.exercises.ex10_orbax_resume import probes

    jax.devices()  # this process has made its devices
    probes.before_solution()
    assert not probes._RESTART
    (tmp_path / "ex10_orbax_resume.py").write_text(
        "_kept = {}\n\n\ndef restore(path, make_state, mesh, shardings):\n    return _kept[path]\n")
    spec = importlib.util.spec_from_file_location("ex10_orbax_resume", tmp_path / "ex10_orbax_resume.py")
    sol = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sol)
    sol._kept["ckpt"] = "a state kept since save"
    [run] = probes.restarted_runs(sol, ex10.draw(TEST_SEED)["config"], [], [probes.MESH_A], "ckpt")
    assert run["restored"] is None and run["restore"]["outcome"] == "failed"
    message = run["restore"]["message"]
    assert "your file imported afresh" in message and "never saved" not in message and "KeyError" in message


def test_the_restarted_jobs_temporary_folder_is_empty_and_its_own(tmp_path):
    # save's temporary folder is the experiment's; the restarted job's restores get another, empty
    # one, their home folder too (a job restarted on another machine has the checkpoint folder and
    # nothing else save wrote), and the process's own come back after each.
    import importlib.util
    import os
    import tempfile

    from graders.exercises.ex10_orbax_resume import probes

    before = (tempfile.gettempdir(), os.environ.get("TMPDIR"), os.environ.get("HOME"))
    with probes.temporary_folder(str(tmp_path)):
        assert tempfile.gettempdir() == os.environ["TMPDIR"] == str(tmp_path)
        (tmp_path / "kept.txt").write_text("written at save")
    assert (tempfile.gettempdir(), os.environ.get("TMPDIR"), os.environ.get("HOME")) == before
    jax.devices()  # the restores run in this process (see the test above), in a temporary folder of their own
    (tmp_path / "ex10_orbax_resume.py").write_text(
        "import os\nimport tempfile\n\n\ndef restore(path, make_state, mesh, shardings):\n"
        "    seen = os.listdir(tempfile.gettempdir())\n"
        "    raise ValueError(f'saw {seen}, home {os.path.expanduser(\"~\") == tempfile.gettempdir()}')\n")
    spec = importlib.util.spec_from_file_location("ex10_orbax_resume", tmp_path / "ex10_orbax_resume.py")
    sol = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sol)
    with probes.temporary_folder(str(tmp_path)):
        [run] = probes.restarted_runs(sol, ex10.draw(TEST_SEED)["config"], [], [probes.MESH_A], "ckpt")
    message = run["restore"]["message"]
    assert "saw [], home True" in message and "only the checkpoint folder" in message, message
    assert (tempfile.gettempdir(), os.environ.get("TMPDIR"), os.environ.get("HOME")) == before


def test_the_restarted_job_cannot_open_a_file_written_since_save_began_outside_the_checkpoint(tmp_path):
    # The hook stays for the process's life: tried in a process of its own, as the restarted job is one.
    # What that process writes itself it reads back.
    import subprocess
    import sys
    import time

    (tmp_path / "before.txt").write_text("written before save")
    (tmp_path / "checkpoint").mkdir()
    time.sleep(0.05)
    since = time.time()
    time.sleep(0.05)
    (tmp_path / "side.txt").write_text("written by save outside the checkpoint")
    (tmp_path / "checkpoint" / "item").write_text("written by save inside it")
    code = (
        "import sys\nfrom pathlib import Path\nfrom graders.exercises.ex10_orbax_resume import probes\n"
        "folder = Path(sys.argv[1])\n"
        "probes.hold_back_files_written_since(float(sys.argv[2]), spared=(str(folder / 'checkpoint'),))\n"
        "assert (folder / 'before.txt').read_text() and (folder / 'checkpoint' / 'item').read_text()\n"
        "(folder / 'own.txt').write_text('a restore writes and reads back a file of its own')\n"
        "assert (folder / 'own.txt').read_text()\n"
        "try:\n    open(folder / 'side.txt').close()\nexcept FileNotFoundError as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path), repr(since)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0 and "outside the checkpoint folder" in done.stdout, (done.stdout, done.stderr[-2000:])


def test_numbers_written_outside_the_arrays_are_read_where_the_learner_writes_them():
    # absent_parts counts a counter as held where the learner wrote it (a name outside Orbax's items,
    # a JSON item, a text pointer, an item's custom_metadata), never in Orbax's own shapes, sizes or hashes.
    import json

    meta = json.dumps({"item_handlers": {}, "init_timestamp_nsecs": 5, "custom_metadata": {"step": 7}})
    files = {"checkpoint/step_11/state/_METADATA": b'{"shape": [12, 13]}',
             "checkpoint/step_11/state/_CHECKPOINT_METADATA": meta.encode(),
             "checkpoint/step_11/state/d/3fa14": b"\x00\x95\xff 14",
             "checkpoint/step_11/meta/metadata": b'{"count": "15", "ok": true}', "checkpoint/LATEST": b"16\n"}
    assert ex10.numbers_in(files) == {7, 11, 15, 16}
    assert ex10.inside(np.asarray([2.0, 3.0]), [("packed", np.asarray([1.0, 2.0, 3.0, 4.0], np.float32))])
    assert not ex10.inside(np.asarray([3.0, 2.0]), [("packed", np.asarray([1.0, 2.0, 3.0, 4.0], np.float32))])


def test_counters_orbax_writes_as_metadata_are_held_by_the_checkpoint(tmp_path):
    # The step and the counts saved in a checkpoint's custom_metadata, or in a JsonSave item of a
    # CheckpointManager step, are part of the Orbax checkpoint (checkpoint_is_an_orbax_folder_holding_the_whole_state);
    # the same numbers in a text file of the learner's own are not.
    import orbax.checkpoint as ocp

    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(tmp_path / "plain", {"w": np.ones(3)}, custom_metadata={"counters": {"step": 17}})
    checkpointer.wait_until_finished()
    manager = ocp.CheckpointManager(tmp_path / "managed")
    manager.save(4, args=ocp.args.Composite(state=ocp.args.StandardSave({"w": np.ones(3)}),
                                            counters=ocp.args.JsonSave({"step": 19, "count": "23"})))
    manager.wait_until_finished()
    (tmp_path / "managed" / "4" / "mine.json").write_text('{"step": 29}')
    files = {str(p.relative_to(tmp_path)): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    found = ex10.orbax_numbers(files)
    assert {17, 19, 23} <= found and 29 not in found
    # A table or data (a shuffle order of 0..255) holds any small counter by chance: it attests none.
    assert ex10.bookkeeping({"step": 5}) == {5}
    assert ex10.bookkeeping({"shuffle_order": list(range(256))}) == set()
    assert ex10.bookkeeping({str(i): 0.001 * i for i in range(100)}) == set()
    # Counted container by container: a record of many small entries beside the counters keeps them.
    assert 5 in ex10.bookkeeping({"counters": {"step": 5}, "shapes": {f"leaf{i}": [10, 16] for i in range(40)}})
    # A plan of one record per step is a table however small each record; words with digits are names.
    assert ex10.bookkeeping({"plan": [{"step": i} for i in range(200)]}) == set()
    assert 5 in ex10.bookkeeping({"step": 5, **{f"opt_state/{i}/mu": "float32" for i in range(40)}})
    saved = {"1/step/value": np.asarray(19, np.int32), "1/opt_state/0/count/value": np.asarray(29, np.int32)}
    step_part = "the optimizer's step and the schedule's counts"
    assert step_part in ex10.missing_parts([], saved, found)
    saved["1/opt_state/0/count/value"] = np.asarray(23, np.int32)
    assert step_part not in ex10.missing_parts([], saved, found)


def test_moments_packed_end_to_end_are_held_and_rewritten_in_place(tmp_path):
    # A checkpoint may pack small leaves into one array (mu and nu of a vector end to end): the
    # grader finds each leaf as a run inside it, and its rewrite writes another state's numbers there.
    import orbax.checkpoint as ocp

    mu, nu = np.asarray([0.5, -0.25, 0.125], np.float32), np.asarray([2.0, 3.0, 5.0], np.float32)
    saved = {"1/opt_state/0/mu/b": mu, "1/opt_state/0/nu/b": nu}
    given = {name: value + 1 for name, value in saved.items()}
    stored = [("packed", np.concatenate([mu, nu]))]
    assert "Adam's moments" not in ex10.missing_parts(stored, saved)
    # A moment of one number repeated (zeros before a first step) is not told apart by where it stands.
    assert "Adam's moments" in ex10.missing_parts([("packed", np.zeros(6, np.float32))],
                                                  {"1/opt_state/0/mu/b": np.zeros(3, np.float32)})
    item = tmp_path / "state"
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(item, {"packed": stored[0][1], "other": np.asarray([9.0, 8.0], np.float32)})
    checkpointer.wait_until_finished()
    tree = ex10.read_tree(str(item))
    files = ex10.rewritten(str(tmp_path), [str(item)], [tree], saved, given)
    assert isinstance(files, dict)
    again = ex10.read_tree(str(item))
    np.testing.assert_array_equal(again["packed"], np.concatenate([mu + 1, nu + 1]))
    np.testing.assert_array_equal(again["other"], [9.0, 8.0])
    # Stacked side by side, one leaf per column: found column by column, and rewritten there.
    columns = tmp_path / "columns"
    checkpointer.save(columns, {"stack": np.stack([mu, nu], axis=1)})
    checkpointer.wait_until_finished()
    assert "Adam's moments" not in ex10.missing_parts([("stack", np.stack([mu, nu], axis=1))], saved)
    assert isinstance(ex10.rewritten(str(tmp_path), [str(columns)], [ex10.read_tree(str(columns))], saved, given), dict)
    np.testing.assert_array_equal(ex10.read_tree(str(columns))["stack"], np.stack([mu + 1, nu + 1], axis=1))


def test_only_vectors_count_packed_and_counters_only_in_a_small_integer_array():
    # A kernel packed into a larger array would be read whole wherever the pack is: it is held as a
    # leaf of its own only. A counter is held inside a small array of counters, not inside any array.
    kernel = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    assert ex10.packable(kernel[0]) and not ex10.packable(kernel)
    assert "the parameters" in ex10.missing_parts([("packed", kernel.reshape(-1))], {"0/w/kernel/value": kernel})
    counters = {"1/opt_state/0/count/value": np.asarray(5, np.int32)}
    step_part = "the optimizer's step and the schedule's counts"
    assert step_part not in ex10.missing_parts([("counters", np.asarray([4, 5, 5], np.int32))], counters)
    assert step_part in ex10.missing_parts([("order", np.arange(256, dtype=np.int32))], counters)


def test_leaves_stacked_on_a_leading_axis_are_held_and_their_blocks_counted():
    # jnp.stack([mu, nu]) of a kernel's moments, read by shards: each slice is held as the leaf, and a
    # device's (2, rows, cols) block counts as a block of each.
    mu = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    saved = {"1/opt_state/0/mu/w": mu, "1/opt_state/0/nu/w": mu * mu}
    assert "Adam's moments" not in ex10.missing_parts([("stack", np.stack([mu, mu * mu]))], saved)
    assert "Adam's moments" in ex10.missing_parts([("stack", np.stack([mu, mu + 1]))], saved)
    piece = {"shape": (2, 3, 1), "device": 5, "from_device": False, "backing": (2, 3, 1), "backing_size": 6}
    split = {(3, 4): (3, 1)}  # the kernel's shape -> its shard's on the mesh
    assert [(p["shape"], p["device"], p["backing_size"]) for p in ex10.blocks([piece], split)] == [((3, 1), 5, 3)] * 2
    # Stacked on a trailing axis instead, (*kernel.shape, 2): the same leaves, the same blocks.
    assert "Adam's moments" not in ex10.missing_parts([("stack", np.stack([mu, mu * mu], axis=-1))], saved)
    trailing = dict(piece, shape=(3, 1, 2))
    assert [p["shape"] for p in ex10.blocks([trailing], split)] == [(3, 1)] * 2
