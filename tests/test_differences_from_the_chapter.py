"""What README's "Differences from the chapter" says a module with only the chapter's interface
scores is what it scores: tests/corpus/<id>/chapter_interface_only.py, graded."""

import re

import pytest

from grading import ROOT, corpus_cases

CASES = [ex for ex in ("ex2", "ex3", "ex4") if "chapter_interface_only" in corpus_cases(ex)]


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
