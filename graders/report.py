"""The report, from the result objects: text (terminal, report.txt), HTML (a notebook) and
Gradescope's results.json. Nothing here grades; everything here reads `grading` results."""

import html
import re
from pathlib import Path

from graders import catalog
from graders.grading import CheckResult, ExerciseResult

MARK = {"passed": "✓", "failed": "✗", "not_attempted": "·", "not_run": "·"}


def _pts(n: int) -> str:
    return f"{n} pt{'s' if n != 1 else ''}"


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def header(solutions: Path, seed: int) -> str:
    return f"Grading {solutions} (seed {seed}; --seed {seed} reproduces this run)"


TABLE_HEAD = f"  {'id':<5} {'exercise':<38} {'status':<14} {'points':>7} {'time':>7}"


def row(r: ExerciseResult) -> str:
    return (f"  {r.ex_id:<5} {catalog.title(r.ex_id):<38} {r.status:<14} "
            f"{f'{r.score}/{r.max_score}':>7} {r.seconds:6.1f}s")


def body(results: list[ExerciseResult], verbose: bool = False) -> str:
    """The ordered table, then what each exercise has to say. `verbose` lists every check."""
    lines = [TABLE_HEAD, *map(row, results)]
    total, most = sum(r.score for r in results), sum(r.max_score for r in results)
    lines.append(f"  {'total':<5} {'':<38} {'':<14} {f'{total}/{most}':>7}")
    for r in results:
        detail = _detail(r, verbose)
        if detail:
            lines += ["", *detail]
    untouched = [r for r in results if r.status == "not attempted"]
    if untouched:
        lines += ["", "not attempted yet:", *map(_still_stubs, untouched),
                  "  Fill them in (each docstring says what to write) and grade again."]
    return "\n".join(lines) + "\n"


# How graders.learner.classify names a stub function that still raises NotImplementedError, and
# how a grader names a stub value left None (the quiz's ANSWERS[3], ex4's constants).
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
    if c.outcome == "failed":
        # one error met by every check is shown once
        shown = "(the same as above)" if c.message == previous else c.message
        return [head, _indent(shown, "      ")]
    return [f"{head}: {c.message}"]


def _detail(r: ExerciseResult, verbose: bool) -> list[str]:
    head = f"{r.ex_id} ({r.module}): {r.status}, {r.score}/{r.max_score}"
    out: list[str] = []
    if r.status in ("error", "timed out"):
        out = [head, _indent(r.reason, "  ")]
        if r.output:
            out += ["  output from your code:", _indent(r.output, "  | ")]
    elif verbose or r.status == "partial" or any(c.outcome == "passed" and c.message for c in r.checks):
        if r.status == "not attempted" and not verbose:
            return []
        out, previous = [head], None
        for c in r.checks:
            # a passing check that explains itself (a quiz answer) is always shown
            if verbose or c.outcome != "passed" or c.message:
                out += _check_lines(c, previous)
            if c.outcome == "failed":
                previous = c.message
    if r.notes:
        out = out or [head]
        out += [_indent(n, "  ") for n in r.notes]
    return out


# ---------------------------------------------------------------- results.json

def results_json(results: list[ExerciseResult], report: str, seconds: float, seed: int) -> dict:
    """Gradescope's results.json. An exercise that could not be graded is one failing entry
    with its reason, worth the exercise's points; extra_data (a field Gradescope stores and
    does not show) keeps what batch grading and `check()` read back."""
    tests = []
    for r in results:
        if r.status in ("error", "timed out"):
            tests.append({"name": f"{r.ex_id}: {r.status}", "tags": [r.ex_id], "score": 0,
                          "max_score": r.max_score, "status": "failed", "output": r.reason,
                          "visibility": "visible"})
            continue
        for c in r.checks:
            tests.append({"name": f"{r.ex_id}: {c.name}", "tags": [r.ex_id], "score": c.score,
                          "max_score": c.points, "status": "passed" if c.outcome == "passed" else "failed",
                          "output": c.message, "visibility": "visible"})
    return {
        "score": sum(r.score for r in results),
        "execution_time": round(seconds, 2),
        # a fenced block keeps the table's columns and the text charts aligned on Gradescope
        "output": "```\n" + report.rstrip("\n") + "\n```",
        "output_format": "md",
        "test_output_format": "text",
        "visibility": "visible",
        "tests": tests,
        "extra_data": {"seed": seed, "exercises": {r.ex_id: {
            "status": r.status, "score": r.score, "max_score": r.max_score,
            "reason": r.reason, "seconds": round(r.seconds, 2),
            "compile_seconds": round(r.compile_seconds, 2), "backend_seconds": round(r.backend_seconds, 2),
            "notes": r.notes,
            "checks": {c.name: {"outcome": c.outcome, "points": c.points, "message": c.message,
                                "seconds": round(c.seconds, 2)} for c in r.checks}}
            for r in results}},
    }


# ---------------------------------------------------------------- HTML (notebooks)

_STYLE = ("<style>.graders td,.graders th{text-align:left;padding:2px 8px;vertical-align:top}"
          ".graders .ok{color:#1a7f37}.graders .no{color:#cf222e}.graders pre{margin:0;white-space:pre-wrap}</style>")


def html_report(results: list[ExerciseResult]) -> str:
    parts = [_STYLE, "<div class='graders'>"]
    for r in results:
        parts.append(f"<p><b>{html.escape(r.ex_id)}</b> ({html.escape(r.module)}): "
                     f"{html.escape(r.status)}, <b>{r.score}/{r.max_score}</b></p>")
        if r.status in ("error", "timed out"):
            parts.append(f"<pre>{html.escape(r.reason)}</pre>")
            if r.output:
                parts.append(f"<p>output from your code:</p><pre>{html.escape(r.output)}</pre>")
            continue
        parts.append("<table><tr><th></th><th>check</th><th>points</th><th>message</th></tr>")
        for c in r.checks:
            cls = "ok" if c.outcome == "passed" else "no"
            parts.append(f"<tr><td class='{cls}'>{MARK[c.outcome]}</td><td>{html.escape(c.name)}</td>"
                         f"<td>{c.score}/{c.points}</td><td><pre>{html.escape(c.message)}</pre></td></tr>")
        parts.append("</table>")
        for n in r.notes:
            parts.append(f"<pre>{html.escape(n)}</pre>")
    parts.append("</div>")
    return "".join(parts)
