"""The graders' own figures kept between runs (graders/kit/figure_store.py): read back for the same figure,
graders and libraries, computed afresh when any of them changes, and never stored when the
grading runs without the cache."""

import json
import shutil

from graders import catalog
from graders.kit import figure_store
from graders.runner import launch


def test_a_stored_figure_is_read_back_not_computed_again(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADERS_EXPECTED_DIR", str(tmp_path))
    calls = []

    def compute():
        calls.append(1)
        return {"full": 12_345, "sizes": (3, 4)}

    first = figure_store.stored("figure", (5, 2, "dots"), compute)
    again = figure_store.stored("figure", (5, 2, "dots"), compute)
    assert calls == [1]
    # the same value, in the same (JSON) types, whether computed or read back
    assert first == again == {"full": 12_345, "sizes": [3, 4]}
    assert len(list(tmp_path.iterdir())) == 1


def test_another_key_or_name_is_computed_afresh(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADERS_EXPECTED_DIR", str(tmp_path))
    assert figure_store.stored("figure", (5, 2), lambda: 1) == 1
    assert figure_store.stored("figure", (5, 3), lambda: 2) == 2
    assert figure_store.stored("other figure", (5, 2), lambda: 3) == 3
    assert figure_store.stored("figure", (5, 2), lambda: 4) == 1


def test_a_changed_grader_file_computes_afresh(tmp_path, monkeypatch):
    graders = tmp_path / "graders"
    shutil.copytree(catalog.GRADERS_DIR, graders, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(catalog, "GRADERS_DIR", graders)
    monkeypatch.setenv("GRADERS_EXPECTED_DIR", str(tmp_path / "expected"))
    figure_store.fingerprint.cache_clear()
    try:
        assert figure_store.stored("figure", 1, lambda: "before") == "before"
        with open(graders / "memory.py", "a") as f:
            f.write("\n# a change to a helper the figures are computed with\n")
        figure_store.fingerprint.cache_clear()
        assert figure_store.stored("figure", 1, lambda: "after") == "after"
    finally:
        figure_store.fingerprint.cache_clear()


def test_a_damaged_file_is_computed_afresh(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADERS_EXPECTED_DIR", str(tmp_path))
    figure_store.stored("figure", 1, lambda: 7)
    (stored,) = tmp_path.iterdir()
    stored.write_text("{not json")
    assert figure_store.stored("figure", 1, lambda: 8) == 8
    assert json.loads(stored.read_text())["value"] == 8


def test_without_the_cache_nothing_is_stored(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADERS_EXPECTED_DIR", str(tmp_path / "expected"))
    env = launch.child_env(60, cache=False, seed=1)
    assert "GRADERS_EXPECTED_DIR" not in env  # --no-cache: the grading process is not told where
    monkeypatch.delenv("GRADERS_EXPECTED_DIR")
    calls = []
    for _ in range(2):
        figure_store.stored("figure", 1, lambda: calls.append(1) or 9)
    assert calls == [1, 1]
    assert not (tmp_path / "expected").exists()
    assert launch.child_env(60, cache=True, seed=1, base={})["GRADERS_EXPECTED_DIR"] == str(
        catalog.ROOT / ".cache" / "expected")


def test_other_jax_settings_compute_afresh_but_the_cache_folder_does_not(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADERS_EXPECTED_DIR", str(tmp_path))
    figure_store.fingerprint.cache_clear()
    try:
        assert figure_store.stored("figure", 1, lambda: "default") == "default"
        monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "elsewhere"))
        figure_store.fingerprint.cache_clear()
        assert figure_store.stored("figure", 1, lambda: "again") == "default"
        monkeypatch.setenv("JAX_ENABLE_X64", "1")
        figure_store.fingerprint.cache_clear()
        assert figure_store.stored("figure", 1, lambda: "x64") == "x64"
    finally:
        figure_store.fingerprint.cache_clear()
