"""What README's "Differences from the chapter" says a module with only the chapter's interface
scores is what it scores: tests/corpus/<id>/chapter_interface_only.py, graded."""

import re

import pytest

from grading import ROOT, corpus_cases

CASES = [ex for ex in ("ex2", "ex3", "ex4", "ex7", "ex9") if "chapter_interface_only" in corpus_cases(ex)]


def _paragraph(ex_id: str) -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Differences from the chapter"):]
    section = section[:section.index("\n## ", 1)]
    number = ex_id.removeprefix("ex")
    found = re.search(rf"\*\*Exercise {number}\b.*?(?=\n\n\*\*Exercise|\n\nExercises|\Z)", section, re.S)
    assert found, f"no paragraph for Exercise {number} in README's Differences from the chapter"
    return " ".join(found.group(0).split())


@pytest.mark.parametrize("ex_id", CASES)
def test_readme_states_what_the_chapters_interface_alone_scores(corpus, ex_id):
    ex = corpus(ex_id)["chapter_interface_only"].exercise(ex_id)
    claim = "A module with only the chapter's interface"
    paragraph = _paragraph(ex_id)
    assert claim in paragraph
    assert f"scores {ex['score']}/{ex['max_score']} here" in paragraph, (ex["score"], ex["max_score"], paragraph)


def test_readme_states_what_exercise_7s_module_level_shard_map_scores(corpus):
    # The chapter's own spelling of the shard_map, returned by the package's factory: the pitfall.
    ex = corpus("ex7")["module_level_shard_map"].exercise("ex7")
    paragraph = _paragraph("ex7")
    assert "whatever mesh it is given scores" in paragraph
    assert f"whatever mesh it is given scores {ex['score']}/{ex['max_score']} here" in paragraph, paragraph


def test_readme_names_the_pinned_optax_for_exercise_7():
    import tomllib
    from importlib import metadata

    pinned = [d for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
              if d.startswith("optax==")]
    assert pinned == [f"optax=={metadata.version('optax')}"], pinned
    assert f"pins Optax {metadata.version('optax')}" in _paragraph("ex7")
