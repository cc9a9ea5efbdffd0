"""The grader's own figures worked out ahead, in a forked process (graders/kit/figure_store.py): the checks
get the same figure through graders/kit/figure_store.py, computed elsewhere, stored only when asked for, and
computed by the checks themselves whenever that process cannot give it."""

import json
import subprocess
import sys
import textwrap

import pytest

from grading import ROOT

# A grading process as the fork server leaves it: JAX imported, no backend yet (or, with
# START_BACKEND, one started before the figures are announced, as a learner's module may).
SCRIPT = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, sys.argv[1])
    import jax, jax.numpy as jnp
    from graders.kit import figure_store

    if sys.argv[2] == "START_BACKEND":
        jnp.ones(1).block_until_ready()
    if sys.argv[2] == "ANOTHER_THREAD":  # as a learner's module (without --sandbox) may start one
        import threading, time
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()

    def where(tag):
        return lambda: {"pid": os.getpid(), "tag": tag}

    def fails():
        raise ValueError("no figure here")

    def jax_sum():  # a figure that needs a backend of its own
        return {"pid": os.getpid(), "sum": float(jnp.arange(5.0).sum())}

    out = {"judge": os.getpid()}
    out["started"] = figure_store.ahead([("a", 1, where("a")), ("b", (2, "x"), jax_sum), ("c", 3, fails),
                                  ("never asked", 4, where("never asked"))])
    out["helper"] = figure_store._run.process.pid if figure_store._run.process else 0
    out["b"] = figure_store.stored("b", (2, "x"), lambda: {"pid": os.getpid(), "sum": -1.0})
    out["a"] = figure_store.stored("a", 1, where("judge a"))
    out["c"] = figure_store.stored("c", 3, where("judge c"))
    out["d"] = figure_store.stored("d", 5, where("judge d"))
    figure_store.stop_ahead()
    out["helper_alive"] = bool(out["helper"]) and os.path.exists(f"/proc/{out['helper']}")
    print(json.dumps(out))
""")


def run(folder, mode: str) -> dict:
    env = {"GRADERS_EXPECTED_DIR": str(folder / "expected"), "JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT), mode], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def forked(tmp_path_factory):
    """(what the script printed, its memo folder), from a process with no backend yet."""
    folder = tmp_path_factory.mktemp("ahead")
    return run(folder, "NO_BACKEND"), folder


def stored_names(folder) -> set[str]:
    return {json.loads(p.read_text())["name"] for p in (folder / "expected").glob("*.json")}


def test_announced_figures_are_computed_in_another_process_in_any_order(forked):
    out, _ = forked
    assert out["started"]
    assert out["a"]["tag"] == "a" and out["a"]["pid"] == out["helper"] != out["judge"]
    # asked for before one announced earlier, and with a JAX backend of the process's own
    assert out["b"] == {"pid": out["helper"], "sum": 10.0}
    assert out["d"] == {"pid": out["judge"], "tag": "judge d"}  # never announced: computed here


def test_a_figure_the_other_process_could_not_compute_is_computed_by_the_checks(forked):
    out, _ = forked
    assert out["c"] == {"pid": out["judge"], "tag": "judge c"}


def test_only_what_the_checks_asked_for_is_stored_and_the_process_is_gone(forked):
    out, folder = forked
    assert stored_names(folder) == {"a", "b", "c", "d"}  # not "never asked"
    assert not out["helper_alive"]


@pytest.mark.parametrize("mode", ["START_BACKEND", "ANOTHER_THREAD"])
def test_with_a_backend_or_another_thread_nothing_is_forked_and_the_checks_compute_everything(tmp_path, mode):
    out = run(tmp_path, mode)
    assert out["started"] is False and out["helper"] == 0
    assert out["a"] == {"pid": out["judge"], "tag": "judge a"}
    assert out["b"] == {"pid": out["judge"], "sum": -1.0}


INTERRUPTED = textwrap.dedent("""
    import json, os, signal, sys, time
    sys.path.insert(0, sys.argv[1])
    import jax
    from graders.kit import figure_store

    def slow():
        time.sleep(3)
        return "from the other process"

    figure_store.ahead([("slow", 1, slow)])
    def stop(*_):
        raise TimeoutError("the check's time limit")
    signal.signal(signal.SIGALRM, stop)
    signal.alarm(1)
    try:
        figure_store.stored("slow", 1, lambda: "never")
        first = "returned"
    except TimeoutError:
        first = "interrupted"
    start = time.monotonic()
    again = figure_store.stored("slow", 1, lambda: "computed by the checks")
    print(json.dumps({"first": first, "again": again, "waited": time.monotonic() - start}))
    figure_store.stop_ahead()
""")


def test_a_wait_cut_short_by_a_time_limit_leaves_later_figures_to_the_checks(tmp_path):
    proc = subprocess.run([sys.executable, "-c", INTERRUPTED, str(ROOT)], capture_output=True, text=True, timeout=60,
                          env={"GRADERS_EXPECTED_DIR": str(tmp_path), "JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # the pipe may have been cut partway through a message: it is not read again
    assert out["first"] == "interrupted" and out["again"] == "computed by the checks" and out["waited"] < 1.0
