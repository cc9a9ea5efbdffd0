"""check() in a notebook: the HTML report under the stylesheets of the notebooks people use
(JupyterLab light and dark, nbconvert's lab template, the classic Notebook, a hostile one),
measured in headless Chromium; what the report says; `result` as a cell's last line; and the
README's notebook steps from a kernel started in another folder."""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import types
from html.parser import HTMLParser

import pytest

import notebook_hosts
from grading import ROOT
from graders import check
from graders.app import notebook, report
from graders.runner.grading import UNGRADED, CheckResult, ExerciseResult

WRONG_EX1 = ROOT / "tests" / "corpus" / "ex1" / "loss_mean_not_sum.py"  # loses loss_sum_counts_only_valid_tokens
WRONG_EX2 = ROOT / "tests" / "corpus" / "ex2" / "groups_swapped.py"  # loses checks, and notes a bar chart
SEED = 4321


class _Cells(HTMLParser):
    """The text of every table cell of a report, in order."""

    def __init__(self):
        super().__init__()
        self.cells: list[str] = []
        self._open = False

    def handle_starttag(self, tag, attrs):
        if tag in ("td", "th"):
            self.cells.append("")
            self._open = True

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._open = False

    def handle_data(self, data):
        if self._open:
            self.cells[-1] += data


def _cells(html: str) -> list[str]:
    parser = _Cells()
    parser.feed(html)
    return [c.strip() for c in parser.cells]


def _made_up_results() -> list[ExerciseResult]:
    ex1 = ExerciseResult("ex1", "partial", checks=[
        CheckResult("first", 2, "What the first check verifies.", "passed"),
        CheckResult("second", 1, "", "passed"),
        CheckResult("third", 3, "", "failed", "expected 3, got <4> & more"),
        CheckResult("fourth", 1, "", "failed", "expected 3, got <4> & more")], seconds=1.25)
    quiz = ExerciseResult("quiz", "error", reason="missing: there is no quiz.py in folder/",
                          checks=[CheckResult("answers", 13)])
    return [ex1, quiz]


def test_the_report_repeats_the_run_totals_and_fills_every_cell():
    results = _made_up_results()
    html = report.html_report(results, 77, report.repeat_call(["ex1", "quiz"], 77, "my folder"))
    assert 'check([&quot;ex1&quot;, &quot;quiz&quot;], solutions=&quot;my folder&quot;, seed=77)' in html
    cells = _cells(html)
    assert all(cells), f"empty cells in {cells}"
    total = cells.index("total")
    assert cells[total + 1] == "3/20", cells  # ex1's passing checks (3 of 7 points), the quiz's error (0 of 13)
    assert "What the first check verifies." in cells, "a passing check without a message shows what it verified"
    assert "expected 3, got <4> & more" in cells and "(the same as above)" in cells
    assert "<4>" not in html, "a message is text, never markup"
    assert report.repeat_call(["ex1"], 5) == 'check("ex1", seed=5)'


class _Kernel:
    """What check() reads of an IPython kernel: that it has one, and the cell it runs."""

    kernel = object()
    execution_count = 3


def _fake_notebook(monkeypatch, shell: _Kernel) -> list:
    """IPython as check() sees it in a notebook: get_ipython() is `shell`, and IPython.display
    records what is shown."""
    shown = []
    ipython = types.ModuleType("IPython")
    ipython.get_ipython = lambda: shell
    display = types.ModuleType("IPython.display")
    display.HTML = lambda text: ("html", text)
    display.display = shown.append
    ipython.display = display
    monkeypatch.setitem(sys.modules, "IPython", ipython)
    monkeypatch.setitem(sys.modules, "IPython.display", display)
    return shown


def test_check_shows_the_table_once_and_the_result_shows_it_again_in_a_later_cell(monkeypatch):
    shell = _Kernel()
    shown = _fake_notebook(monkeypatch, shell)
    result = check("quiz", seed=SEED)  # the stub: not attempted
    assert shown == [("html", result.html)]
    assert f"check(&quot;quiz&quot;, seed={SEED})" in result.html
    assert result._repr_html_() is None, "the same cell would show the table twice"
    shell.execution_count += 1
    assert result._repr_html_() == result.html
    quiet = notebook.Result(result.exercises, result.report, result.html)  # as check(..., display=False) returns it
    assert quiet._repr_html_() == quiet.html, "a result not shown yet shows its table"


def _readme_notebook_cells() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("**In a notebook**"):text.index("## For instructors")]
    return [textwrap.dedent(block).strip() for block in re.findall(r"```python\n(.*?)```", section, re.S)]


# The two IPython magics the README uses, as IPython runs them (IPython.core.magics.osm: %cd
# expands ~ and changes the process's folder; %%writefile expands ~ and writes the cell's body
# to that path, relative to the current folder), and the kernel's sys.path, which holds '' (the
# current folder: IPython's InteractiveShellApp.init_path).
_KERNEL = textwrap.dedent("""
    import json, os, sys
    if "" not in sys.path:
        sys.path.insert(0, "")
    namespace = {}
    for cell in json.loads(sys.stdin.read()):
        first, _, rest = cell.partition("\\n")
        if first.startswith("%%writefile "):
            with open(os.path.expanduser(first.split(None, 1)[1]), "w") as f:
                f.write(rest + "\\n")
        elif first.startswith("%cd "):
            os.chdir(os.path.expanduser(first.split(None, 1)[1].split("#")[0].strip()))
        else:
            exec(compile(cell, "<cell>", "exec"), namespace)
    r = namespace["result"]
    print(json.dumps([r.score, r.max_score, [[c.name, c.outcome] for c in r.checks]]))
""")


@pytest.mark.course
def test_the_readme_notebook_steps_work_from_a_kernel_started_elsewhere(tmp_path):
    """Both ways the README gives, each in a fresh kernel started in the notebook's own folder:
    the solution written lands in the package's exercises/, and check() grades it."""
    cells = _readme_notebook_cells()
    home = tmp_path / "home"
    package = home / "jax-scale-exercises"
    for part in ("graders", "exercises"):
        shutil.copytree(ROOT / part, package / part, ignore=shutil.ignore_patterns("__pycache__"))
    notebooks = home / "notebooks"
    notebooks.mkdir()
    assert cells[0].startswith("%cd ~/jax-scale-exercises"), cells[0]
    by_cd, by_path, after = cells[:3], cells[3:5], cells[5:]
    assert by_path[0].startswith("%%writefile ~/jax-scale-exercises/exercises/"), by_path[0]
    solution = package / "exercises" / "ex1_token_accumulation.py"
    env = dict(os.environ, HOME=str(home),
               # the package's compilation cache and graders' figures, warm, rather than the copy's
               JAX_COMPILATION_CACHE_DIR=str(ROOT / ".cache" / "jax"), GRADERS_EXPECTED_DIR=str(ROOT / ".cache" / "expected"))
    env.pop("PYTHONPATH", None)
    outcomes = {}
    for way, steps, source in (("%cd", by_cd, WRONG_EX1), ("path", by_path, ROOT / "reference" / solution.name)):
        code = source.read_text()
        steps = [s.replace("...your solution...", code) if s.startswith("%%writefile") else s for s in steps]
        proc = subprocess.run([sys.executable, "-c", _KERNEL], input=json.dumps(steps + after), cwd=notebooks,
                              env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{way}: {proc.stderr[-3000:]}"
        assert solution.read_text().strip() == code.strip(), f"{way}: the cell was not written to the package"
        score, most, checks = json.loads(proc.stdout.strip().splitlines()[-1])
        outcomes[way] = (score, most, dict(checks))
    score, most, checks = outcomes["%cd"]
    assert checks["loss_sum_counts_only_valid_tokens"] == "failed" and score < most
    score, most, checks = outcomes["path"]
    assert score == most > 0, checks


# ---------------------------------------------------------------- in a browser


@pytest.fixture(scope="module")
def failing_report(tmp_path_factory):
    """check()'s HTML for exercises that fail (ex1, ex2 with its bar chart), one not attempted
    (ex7's stub) and one missing (the quiz)."""
    folder = tmp_path_factory.mktemp("solutions")
    shutil.copy(WRONG_EX1, folder / "ex1_token_accumulation.py")
    shutil.copy(WRONG_EX2, folder / "ex2_sqrt_checkpointing.py")
    shutil.copy(ROOT / "exercises" / "ex7_megatron_tp.py", folder)
    result = check(["ex1", "ex2", "ex7", "quiz"], solutions=folder, seed=SEED, display=False)
    assert [r.status for r in result.exercises] == ["partial", "partial", "not attempted", "missing"]
    assert any(n.count("#") > 20 for n in result.exercises[1].notes), "ex2 should note its bar chart"
    return result, f'check(["ex1", "ex2", "ex7", "quiz"], solutions="{folder}", seed={SEED})'


@pytest.mark.course
@pytest.mark.parametrize("host", list(notebook_hosts.HOSTS))
def test_the_report_holds_its_layout_in_every_notebook(failing_report, host):
    browser = notebook_hosts.chromium()
    assert browser, ("this test renders the report in Chromium: install it (Debian: apt-get install chromium; "
                     ".ci/run does)")
    result, call = failing_report
    failed = {c.message for c in result.checks if c.outcome == "failed"}
    notes = [n for r in result.exercises for n in r.notes]
    for seen in notebook_hosts.measure(result.html, host, browser):
        where = f"{host}, {seen['width']} px"
        assert call in seen["text"], f"{where}: the report does not say how to repeat the run"
        cells = seen["cells"]
        tabled = [c for r in result.exercises if r.status not in UNGRADED for c in r.checks]
        assert len(cells) >= len(tabled) * 4, where
        assert not [c for c in cells if not c["text"]], f"{where}: empty cells"
        right = [c["text"][:30] for c in cells if c["align"] != "left"]
        assert not right, f"{where}: {len(right)} of {len(cells)} cells not left-aligned: {right[:5]}"
        assert all(abs(left) < 1 for left in seen["tables"]), f"{where}: a table is not at the left: {seen['tables']}"
        assert not seen["broken"], f"{where}: words broken over two lines: {seen['broken'][:10]}"
        names = [c for c in cells if c["text"] in {x.name for x in tabled}]
        assert names and all(c["fixed"] for c in names), f"{where}: check names not in a fixed-width font"
        blocks = seen["blocks"]
        for block in blocks:
            what = f"{where}: {block['text'][:50]!r}"
            assert block["fixed"] and "monospace" in block["font"], f"{what}: font {block['font']}"
            assert block["wordBreak"] == "normal" and block["overflowWrap"] in ("normal", "break-word"), \
                f"{what}: word-break {block['wordBreak']}, overflow-wrap {block['overflowWrap']}"
            assert block["align"] == "left", f"{what}: text-align {block['align']}"
        messages = [b for b in blocks if b["text"] in failed or b["text"] == result.exercises[3].reason]
        assert {b["text"] for b in messages} == failed | {result.exercises[3].reason}, f"{where}: messages missing"
        for block in messages:
            assert block["whiteSpace"] == "pre-wrap", f"{where}: a message does not wrap: {block['whiteSpace']}"
            assert not block["overflows"], f"{where}: a message runs past its cell: {block['text'][:50]!r}"
        assert [b["text"] for b in blocks if b["text"] in notes] == notes, f"{where}: notes missing"
        if seen["width"] == min(notebook_hosts.WIDTHS):
            assert sum(b["lines"] > 2 for b in messages) >= len(messages) // 2, f"{where}: messages did not wrap"

