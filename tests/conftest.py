import os

# The quiz-key tests run JAX in this process: 8 simulated devices, set before JAX is imported.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Every run a test starts serves itself and ends: a fork server kept between runs
# (graders/runner/kept_server.py) is tested on its own, in tests/test_resident_server.py.
os.environ["GRADERS_NO_RESIDENT"] = "1"

import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from grading import ROOT, grade, grade_corpus

_corpus_cache: dict = {}
# Corpora being graded in the background (see pytest_collection_finish): ex_id -> Future.
_background: dict = {}
_background_pool: ThreadPoolExecutor | None = None


def _corpus_exercise(item) -> str | None:
    """The exercise whose corpus a test reads through the `corpus` fixture: named in its
    parameters (ex_id, "ex2/case") or in its module's name (test_ex2_grader)."""
    if "corpus" not in getattr(item, "fixturenames", ()):
        return None
    params = getattr(getattr(item, "callspec", None), "params", {})
    for value in [*params.values(), item.module.__name__.replace("_", " ")]:
        found = re.search(r"\b(ex\d+|quiz)\b", str(value))
        if found:
            return found.group(1)
    return None


def pytest_collection_finish(session):
    """Start grading, in a background thread, the corpora the selected tests read, in the order
    they first ask for them. Most other tests leave a CPU idle much of the time (in-process
    checks, a single grading, a wait for a timeout), and the corpora, about 40% of the suite's
    time when graded in turn, fill it: `make test` took 317 s without this and 282 s with it on
    2 CPUs (warm checkout). A corpus asked for before the background has started it is graded
    in the foreground instead (the `corpus` fixture)."""
    global _background_pool
    order = list(dict.fromkeys(ex for ex in map(_corpus_exercise, session.items) if ex))
    if not order or session.config.option.collectonly:
        return
    env = dict(os.environ)  # as the session starts: some tests point it elsewhere for a while
    _background_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="corpus")
    for ex_id in order:
        _background[ex_id] = _background_pool.submit(grade_corpus, ex_id, env)


def pytest_sessionfinish(session):
    if _background_pool is not None:
        _background_pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="session")
def reference_run():
    """Every exercise of reference/ graded in one run of the command."""
    return grade(ROOT / "reference")


@pytest.fixture(scope="session")
def stub_run():
    """Every exercise of the untouched exercises/ graded in one run of the command."""
    return grade(ROOT / "exercises")


@pytest.fixture(scope="session")
def corpus():
    """corpus(ex_id) -> {case: Run}: each wrong solution of tests/corpus/<ex_id>/ graded once."""
    def get(ex_id: str):
        if ex_id not in _corpus_cache:
            started = _background.pop(ex_id, None)
            if started is not None and not started.cancel():
                _corpus_cache[ex_id] = started.result()  # being graded, or done, in the background
            else:
                _corpus_cache[ex_id] = grade_corpus(ex_id)
        return _corpus_cache[ex_id]
    return get


@pytest.fixture
def compiled_as_graded():
    """JAX in this process compiles as the grading processes do (graders.runner.launch.COMPILER_SETTINGS),
    for a test that runs a grader's own programs here and claims what a grading run sees."""
    import jax

    from graders.runner import launch

    flags = {name.lower(): value == "true" for name, value in launch.COMPILER_SETTINGS.items()}
    before = {name: jax.config.read(name) for name in flags}
    for name, value in flags.items():
        jax.config.update(name, value)
    yield
    for name, value in before.items():
        jax.config.update(name, value)
