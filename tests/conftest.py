import os

# The quiz-key tests run JAX in this process: 8 simulated devices, set before JAX is imported.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Every run a test starts serves itself and ends: a fork server kept between runs
# (graders/runner/kept_server.py) is tested on its own, in tests/test_resident_server.py.
os.environ["GRADERS_NO_RESIDENT"] = "1"

import re

import pytest

from grading import CORPUS, MEASURING, ROOT, Corpora, drawing_exercises, far_draw_seed, grade, grade_with_cache

# The corpora the selected tests read, graded in the background while the tests run (see
# pytest_collection_finish); None until the session has collected its tests.
_corpora: Corpora | None = None


def _full(item) -> bool:
    """Whether a test reads the corpora in full (every case, graded whole): the course tests do;
    `make test`'s read each wrong solution's declared checks and a sample of the right ones
    (tests/grading.py: selected_cases)."""
    return item.get_closest_marker("course") is not None


def _corpus_read(item) -> tuple[str, object, bool] | None:
    """The corpus a test reads through the `corpus` fixture: (ex_id, folder, full), the exercise named
    in its parameters (ex_id, "ex2/case") or in its module's name (test_ex2_grader), the folder
    its module's CORPUS_FOLDER (tests/right/ for tests/test_right_solutions.py), else tests/corpus/."""
    if "corpus" not in getattr(item, "fixturenames", ()):
        return None
    params = getattr(getattr(item, "callspec", None), "params", {})
    for value in [*params.values(), item.module.__name__.replace("_", " ")]:
        found = re.search(r"\b(ex\d+|quiz)\b", str(value))
        if found:
            return found.group(1), getattr(item.module, "CORPUS_FOLDER", CORPUS), _full(item)
    return None


def pytest_collection_finish(session):
    """Start grading the corpora the selected tests read, in the order they first ask for them,
    one case at a time, in the background (grading.Corpora). Most other tests leave a CPU idle
    much of the time (in-process checks, a single grading, a wait for a timeout), and the
    corpora, about 60% of the suite's CPU, fill it; a test that needs a corpus grades what is
    left of it beside the background."""
    global _corpora
    _corpora = Corpora(dict(os.environ))  # as the session starts: some tests point it elsewhere for a while
    if session.config.option.collectonly:
        return
    for read in dict.fromkeys(filter(None, map(_corpus_read, session.items))):
        _corpora.want(*read)
    _corpora.start()


def pytest_sessionfinish(session):
    if _corpora is not None:
        _corpora.stop()


@pytest.fixture(scope="session")
def reference_run():
    """Every exercise of reference/ graded in one run of the command."""
    return grade(ROOT / "reference")


@pytest.fixture(scope="session")
def stub_run():
    """Every exercise of the untouched exercises/ graded in one run of the command."""
    return grade(ROOT / "exercises")


@pytest.fixture
def corpus(request):
    """corpus(ex_id, folder=tests/corpus) -> {case: Run}: each solution of <folder>/<ex_id>/ the
    test reads (_full) graded once (the wrong ones by default)."""
    full = _full(request.node)
    return lambda ex_id, folder=CORPUS: _corpora.get(ex_id, folder, full)


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


@pytest.fixture(scope="session")
def cold_far_draw(tmp_path_factory):
    """(run, cache folder, seed): reference/ graded once at the far draw (grading.far_draw_seed)
    with an empty compilation cache and figure store, for the exercises that draw their
    configuration and those whose report carries compiled-program figures. Read by
    tests/test_drawn_configurations.py (full marks at another draw) and
    tests/test_compilation_cache.py (the same figures when graded again from what it stored):
    one cold grading serves both."""
    cache = tmp_path_factory.mktemp("cold-cache")
    seed = far_draw_seed()
    run = grade_with_cache(cache, list(dict.fromkeys(drawing_exercises() + MEASURING)), "--seed", str(seed))
    return run, cache, seed
