import os

# The quiz-key tests run JAX in this process: 8 simulated devices, set before JAX is imported.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest

from grading import ROOT, grade, grade_corpus

_corpus_cache: dict = {}


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
            _corpus_cache[ex_id] = grade_corpus(ex_id)
        return _corpus_cache[ex_id]
    return get


@pytest.fixture
def compiled_as_graded():
    """JAX in this process compiles as the grading processes do (graders.process.COMPILER_SETTINGS),
    for a test that runs a grader's own programs here and claims what a grading run sees."""
    import jax

    from graders import process

    flags = {name.lower(): value == "true" for name, value in process.COMPILER_SETTINGS.items()}
    before = {name: jax.config.read(name) for name in flags}
    for name, value in flags.items():
        jax.config.update(name, value)
    yield
    for name, value in before.items():
        jax.config.update(name, value)
