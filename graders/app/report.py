"""The report, from the result objects: text (terminal, report.txt), HTML (a notebook) and
Gradescope's results.json. Nothing here grades; everything here reads `grading` results."""

import html
import re
import json
from pathlib import Path

from graders import catalog
from graders.runner.grading import ON_SUBMISSION, UNGRADED, CheckResult, ExerciseResult, status_of

MARK = {"passed": "✓", "failed": "✗", "not_attempted": "·", "not_run": "·", "deferred": "…"}


def _pts(n: int) -> str:
    return f"{n} pt{'s' if n != 1 else ''}"


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def header(solutions: Path, seed: int, isolation: str = "", missing=()) -> str:
    """`isolation`: the sandbox's level (graders/child/sandbox.py), when there is one; `missing`:
    the modules the graded folder does not hold."""
    text = f"Grading {solutions} (seed {seed}; --seed {seed} reproduces this run)"
    public = catalog.public_seed()
    if public is not None:
        text += (f"\n  the students' copy: its checks grade on the public seed {public}, with the graders' expected "
                 "values recorded for it when the copy was made; the rest is graded when you submit")
    if missing:
        text += f"\n  missing from {solutions}/: {', '.join(missing)}"
    if isolation:
        from graders.child import sandbox

        text += f"\n  sandbox: {sandbox.describe(isolation)}"
    return text


TABLE_HEAD = f"  {'id':<5} {'exercise':<38} {'status':<14} {'points':>7} {'time':>7}"


AFTER_DUE = "after due date"  # the status shown, before the due date, of an exercise shown only after it


def row(r: ExerciseResult) -> str:
    points = f"{r.score}/{r.max_score}" if r.status != AFTER_DUE else f"?/{r.later}"
    return f"  {r.ex_id:<5} {catalog.title(r.ex_id):<38} {r.status:<14} {points:>7} {r.seconds:6.1f}s"


def body(results: list[ExerciseResult], verbose: bool = False) -> str:
    """The ordered table, then what each exercise has to say. `verbose` lists every check."""
    lines = [TABLE_HEAD, *map(row, results)]
    total, most = sum(r.score for r in results), sum(r.max_score for r in results)
    lines.append(f"  {'total':<5} {'':<38} {'':<14} {f'{total}/{most}':>7}")
    later = sum(r.later for r in results)
    if later:
        lines.append(f"  (and {_pts(later)} of checks whose results are shown after the due date)")
    for r in results:
        detail = _detail(r, verbose)
        if detail:
            lines += ["", *detail]
    untouched = [r for r in results if r.status == "not attempted"]
    if untouched:
        lines += ["", "not attempted yet:", *map(_still_stubs, untouched),
                  "  Fill them in (each docstring says what to write) and grade again."]
    return "\n".join(lines) + "\n"


# How graders.kit.verdicts.classify names a stub function that still raises NotImplementedError,
# and how a grader names a stub value left None (the quiz's ANSWERS[3], ex4's constants).
_STUB = re.compile(r"`(\w+)`(?:, which)? still raises NotImplementedError")
_NONE = re.compile(r"(\w+)(?:\[[^\]]*\])? is still None")


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _still_stubs(r: ExerciseResult) -> str:
    """The module, and what its checks found still as the stub left it."""
    def found(pattern):
        return list(dict.fromkeys(m.group(1) for c in r.checks for m in [pattern.search(c.message or "")] if m))

    said = []
    if raising := found(_STUB):
        said.append(f"{_and([f'`{n}`' for n in raising])} still raise{'s' if len(raising) == 1 else ''} "
                    "NotImplementedError")
    if unset := found(_NONE):
        said.append(f"{_and(unset)} {'is' if len(unset) == 1 else 'are'} still None")
    return f"  {r.module}{': ' + '; '.join(said) if said else ''}"


def format_report(results: list[ExerciseResult], solutions: Path, seed: int, verbose: bool = False) -> str:
    return header(solutions, seed) + "\n\n" + body(results, verbose)


def _check_lines(c: CheckResult, previous: str | None) -> list[str]:
    head = f"  {MARK[c.outcome]} {c.name} ({_pts(c.points)})"
    if c.outcome == "passed":
        return [head] + ([_indent(c.message, "      ")] if c.message else [])
    if c.outcome in ("failed", "deferred"):
        # one error met by every check is shown once
        shown = "(the same as above)" if c.message == previous else c.message
        return [head, _indent(shown, "      ")]
    return [f"{head}: {c.message}"]


def before_due(results: list[ExerciseResult], after_due: set[tuple[str, str]]) -> list[ExerciseResult]:
    """The results as students may see them before the due date: the checks in `after_due`
    ((exercise, check) pairs) left out, with their points counted in `later`, the exercise's
    status taken from the checks left, and its notes dropped (they may speak of the checks left
    out). An exercise that could not be graded, or whose hidden checks all found the stub, keeps
    its status and reason: they tell nothing of the answers. Every check whose outcome is left out here is in results.json's tests, shown
    after the due date."""
    from dataclasses import replace

    shown = []
    for r in results:
        hidden = [c for c in r.checks if (r.ex_id, c.name) in after_due]
        if not hidden or r.status in UNGRADED or {c.outcome for c in hidden} == {"not_attempted"}:
            shown.append(r)
            continue
        kept = [c for c in r.checks if c not in hidden]
        status = status_of(kept) if kept else AFTER_DUE
        shown.append(replace(r, checks=kept, status=status, notes=[], later=sum(c.points for c in hidden)))
    return shown


def _detail(r: ExerciseResult, verbose: bool) -> list[str]:
    head = f"{r.ex_id} ({r.module}): {r.status}, {r.score}/{r.max_score}"
    if r.later:
        head += f" (and {_pts(r.later)} shown after the due date)"
    if r.status == AFTER_DUE:
        return []
    out: list[str] = []
    if r.status in UNGRADED:
        out = [head, _indent(r.reason, "  ")]
        if r.output:
            out += ["  output from your code:", _indent(r.output, "  | ")]
    elif r.status == ON_SUBMISSION and len({c.message for c in r.checks}) == 1:
        out = [head, f"  {MARK['deferred']} every check: {r.checks[0].message}"]
    elif (verbose or r.status in ("partial", ON_SUBMISSION) or any(c.outcome == "passed" and c.message for c in r.checks)
          or any(c.outcome == "deferred" for c in r.checks)):
        if r.status == "not attempted" and not verbose:
            return []
        out, previous = [head], None
        for c in r.checks:
            # a passing check that explains itself (a quiz answer) is always shown
            if verbose or c.outcome != "passed" or c.message:
                out += _check_lines(c, previous)
            if c.outcome in ("failed", "deferred"):
                previous = c.message
    if r.notes:
        out = out or [head]
        out += [_indent(n, "  ") for n in r.notes]
    return out


# ---------------------------------------------------------------- results.json

def results_json(results: list[ExerciseResult], report: str, seconds: float, seed: int,
                 extra: dict | None = None, after_due: set[tuple[str, str]] = frozenset()) -> dict:
    """Gradescope's results.json. An exercise that could not be graded lists each check with 0
    and its reason; extra_data (a field Gradescope stores and does not show) keeps what batch
    grading and `check()` read back. The checks in `after_due` ((exercise, check) pairs) have
    Gradescope's visibility "after_due_date"; `report` (the visible "output") must then be the
    before_due() view."""
    def seen(ex_id: str, name: str) -> str:
        return "after_due_date" if (ex_id, name) in after_due else "visible"

    tests = []
    for r in results:
        if r.status in UNGRADED:
            # Every check still appears, with 0 and the reason: each submission has the same
            # test names, so Gradescope's per-test statistics compare like with like.
            for c in r.checks:
                tests.append({"name": f"{r.ex_id}: {c.name}", "tags": [r.ex_id], "score": 0,
                              "max_score": c.points, "status": "failed",
                              "output": r.reason if r.reason.startswith(r.status) else f"{r.status}: {r.reason}",
                              "visibility": seen(r.ex_id, c.name)})
            continue
        for c in r.checks:
            if c.outcome == "deferred":  # the students' copy: graded when submitted, neither way here
                tests.append({"name": f"{r.ex_id}: {c.name}", "tags": [r.ex_id], "score": 0, "max_score": 0,
                              "output": c.message, "visibility": "visible"})
                continue
            tests.append({"name": f"{r.ex_id}: {c.name}", "tags": [r.ex_id], "score": c.score,
                          "max_score": c.points, "status": "passed" if c.outcome == "passed" else "failed",
                          "output": c.message, "visibility": seen(r.ex_id, c.name)})
    return {
        "score": sum(r.score for r in results),
        "execution_time": round(seconds, 2),
        # a fenced block keeps the table's columns and the text charts aligned on Gradescope
        "output": "```\n" + report.rstrip("\n") + "\n```",
        "output_format": "md",
        "test_output_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",  # the runner's own printout holds every check's message
        "tests": tests,
        "extra_data": {"seed": seed, **(extra or {}), "exercises": {r.ex_id: {
            "status": r.status, "score": r.score, "max_score": r.max_score,
            "reason": r.reason, "seconds": round(r.seconds, 2), **({"autograder_fault": r.fault} if r.fault else {}),
            "compile_seconds": round(r.compile_seconds, 2), "backend_seconds": round(r.backend_seconds, 2),
            "notes": r.notes,
            "checks": {c.name: {"outcome": c.outcome, "points": c.points, "message": c.message,
                                "seconds": round(c.seconds, 2)} for c in r.checks}}
            for r in results}},
    }


# ---------------------------------------------------------------- HTML (notebooks)

# Every element carries its whole style inline. A notebook's own stylesheet reaches into its
# outputs (JupyterLab: `.jp-RenderedHTMLCommon td {text-align: right}`, `.jp-OutputArea-output pre
# {word-break: break-all}`; nbconvert's lab template: `pre {font-family: inherit}`), and a rule of
# ours in a <style> loses to a more specific one, while JupyterLab drops <style> from an untrusted
# notebook's outputs altogether. An inline declaration beats any selector, and with !important
# also a host's !important rule; every value here is one JupyterLab's sanitizer keeps.
_MONO = "font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,'DejaVu Sans Mono','Liberation Mono',monospace !important"
_CELL = "text-align:left !important;vertical-align:top !important;padding:2px 10px 2px 0;border:none"
_AT_SPACES = "white-space:normal !important;word-break:normal !important;overflow-wrap:normal !important"
_TABLE = "border-collapse:collapse;border:none;margin:4px 0 10px 0 !important;table-layout:auto !important"
_STYLE = {
    "report": "text-align:left !important",
    "p": "text-align:left !important;margin:6px 0",
    "code": f"{_MONO};white-space:pre-wrap !important;word-break:normal !important;overflow-wrap:break-word !important;"
            "background:transparent;padding:0",
    "table": f"{_TABLE};width:auto",
    # A table of checks spans the output, and a check's name has about a third of it: the message
    # column does not squeeze the names when there is room, nor they it in a narrow notebook.
    "checks": f"{_TABLE};width:100%",
    "th": f"{_CELL};font-weight:bold;white-space:nowrap !important;border-bottom:1px solid rgba(128,128,128,0.5)",
    "td": f"{_CELL};{_AT_SPACES}",
    "name": f"{_CELL};{_MONO};{_AT_SPACES}",
    "check": f"{_CELL};{_MONO};{_AT_SPACES};width:34%",
    "number": f"{_CELL};white-space:nowrap !important",
    "mark": f"{_CELL};white-space:nowrap !important;font-weight:bold",
    "total": f"{_CELL};font-weight:bold;white-space:nowrap !important;border-top:1px solid rgba(128,128,128,0.5)",
    # What a check says, and why an exercise could not be graded: wrapped at spaces to the width
    # there is; a word longer than a whole line is the only one broken (overflow-wrap: break-word).
    "message": f"{_MONO};text-align:left !important;white-space:pre-wrap !important;word-break:normal !important;"
               "overflow-wrap:break-word !important;margin:0;padding:0;border:none;background:transparent;"
               "font-size:100%;line-height:1.35;overflow:visible",
    # Notes (ex2's bar chart) and the learner's output keep their columns: never wrapped, scrolled.
    "note": f"{_MONO};text-align:left !important;white-space:pre !important;word-break:normal !important;"
            "overflow-wrap:normal !important;margin:4px 0 8px 0;padding:0;border:none;background:transparent;"
            "font-size:100%;line-height:1.35;overflow-x:auto",
}
_COLOUR = {"passed": "#2da44e", "failed": "#e5534b"}  # readable on a light and on a dark theme
OUTCOME = {"passed": "passed", "failed": "failed", "not_attempted": "not attempted", "not_run": "not run",
           "deferred": "graded when you submit"}


def _tag(name: str, style: str, text: str, raw: bool = False, colour: str | None = None, **attrs: str) -> str:
    """<name style=...>text</name>: `text` escaped unless `raw` (then it is markup made here)."""
    css = (f"color:{colour};" if colour else "") + _STYLE[style]
    extra = "".join(f' {k.rstrip("_")}="{html.escape(v)}"' for k, v in attrs.items())
    return f'<{name} style="{css}"{extra}>{text if raw else html.escape(text)}</{name}>'


def _code(text: str) -> str:
    return _tag("code", "code", text)


def _row(cells: list[str]) -> str:
    return "<tr>" + "".join(cells) + "</tr>"


def repeat_call(ids: list[str], seed: int, solutions: str | None = None) -> str:
    """The `check(...)` call that grades these exercises again with the same drawn configurations."""
    what = json.dumps(ids[0]) if len(ids) == 1 else "[" + ", ".join(map(json.dumps, ids)) + "]"
    where = f", solutions={json.dumps(solutions)}" if solutions is not None else ""
    return f"check({what}{where}, seed={seed})"


def _checks_table(r: ExerciseResult) -> str:
    rows = [_row([_tag("th", "th", h) for h in ("result", "check", "points", "message")])]
    previous = None
    for c in r.checks:
        mark = _tag("td", "mark", MARK[c.outcome], colour=_COLOUR.get(c.outcome), title=OUTCOME[c.outcome])
        if c.outcome == "passed":
            # what it verified, when the check says nothing of its own
            said = c.message or c.doc or "passed"
        elif c.outcome == "failed" and c.message == previous:
            said = "(the same as above)"  # one error met by every check is shown once
        else:
            said = c.message or OUTCOME[c.outcome]
        if c.outcome == "failed":
            previous = c.message
        # A check's name may break after an underscore (<wbr>), so that a narrow notebook keeps
        # room for the message; nothing else in the report breaks inside a word.
        name = html.escape(c.name).replace("_", "_<wbr>")
        rows.append(_row([mark, _tag("td", "check", name, raw=True), _tag("td", "number", f"{c.score}/{c.points}"),
                          _tag("td", "td", _tag("pre", "message", said), raw=True)]))
    return _tag("table", "checks", "".join(rows), raw=True)


def html_report(results: list[ExerciseResult], seed: int, call: str) -> str:
    """The report as a notebook shows it: how to repeat the run, a table of the exercises with the
    total, then each exercise's checks. `call` is the check(...) call that repeats this run."""
    parts = [_tag("p", "p", f"Seed {seed}: {_code(call)} repeats this run.", raw=True)]
    rows = [_row([_tag("th", "th", h) for h in ("id", "exercise", "status", "time", "points")])]
    for r in results:
        rows.append(_row([_tag("td", "name", r.ex_id), _tag("td", "td", catalog.title(r.ex_id)),
                          _tag("td", "td", r.status), _tag("td", "number", f"{r.seconds:.1f} s"),
                          _tag("td", "number", f"{r.score}/{r.max_score}")]))
    total, most = sum(r.score for r in results), sum(r.max_score for r in results)
    rows.append(_row([_tag("td", "total", "total", colspan="4"), _tag("td", "total", f"{total}/{most}")]))
    parts.append(_tag("table", "table", "".join(rows), raw=True))
    for r in results:
        parts.append(_tag("p", "p", f"<b>{html.escape(r.ex_id)}</b> ({_code(r.module)}): "
                                    f"{html.escape(r.status)}, <b>{r.score}/{r.max_score}</b>", raw=True))
        if r.status in UNGRADED:
            parts.append(_tag("pre", "message", r.reason))
            if r.output:
                parts.append(_tag("p", "p", "output from your code:") + _tag("pre", "note", r.output))
        else:
            parts.append(_checks_table(r))
        parts += [_tag("pre", "note", n) for n in r.notes]
    untouched = [r.module for r in results if r.status == "not attempted"]
    if untouched:
        parts.append(_tag("p", "p", f"Not attempted yet (the stubs are unchanged): {', '.join(untouched)}. "
                                    "Fill them in (each docstring says what to write) and check again."))
    return _tag("div", "report", "".join(parts), raw=True, class_="graders-report")
