"""Results as they come: each exercise's row the moment it is graded, and on a terminal one
live line saying which exercise and check is running. In a pipe (CI logs, an editor, a
notebook cell) only whole lines are written, so nothing is left behind but the rows; with
`progress_lines` (watch mode) a whole line also says what has been running for a while
("  … ex8: checking train_is_one_scan_in_one_jit, 20 s so far"), so that a slow grading is
never silent."""

import shutil
import sys
import threading
import time

from graders.app import report
from graders.runner.grading import ExerciseResult

TICK = 0.5  # seconds between redraws of the live line
PROGRESS_AFTER = 5.0  # seconds on one check before a progress line names it (in a pipe, watch mode)
PROGRESS_EVERY = 15.0  # and then again this often, while it is still running


class Live:
    def __init__(self, stream=None, live_line: bool | None = None, progress_lines: bool = False):
        self.stream = stream or sys.stdout
        self.live_line = self.stream.isatty() if live_line is None else live_line
        self.progress_lines = progress_lines and not self.live_line
        self._lock = threading.Lock()
        self._running: dict[str, str] = {}  # exercise -> what it is doing
        self._since: dict[str, float] = {}  # exercise -> when it started doing it
        self._said: dict[str, float] = {}  # exercise -> when a progress line last named it
        self._start = time.monotonic()
        self._shown = False
        self._stop = threading.Event()
        if self.live_line or self.progress_lines:
            threading.Thread(target=self._tick, daemon=True).start()

    def line(self, text: str) -> None:
        with self._lock:
            self._clear()
            self.stream.write(text + "\n")
            self.stream.flush()
            self._draw()

    def event(self, ex_id: str, event: dict) -> None:
        kind = event.get("event")
        with self._lock:
            if kind in ("importing", "start"):
                self._running[ex_id] = "importing your module" if kind == "importing" else str(event.get("check", ""))
                self._since[ex_id] = time.monotonic()
                self._said.pop(ex_id, None)
            self._draw()

    def done(self, result: ExerciseResult) -> None:
        with self._lock:
            self._running.pop(result.ex_id, None)
        self.line(report.row(result))

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            self._clear()
            self.stream.flush()

    def _tick(self) -> None:
        while not self._stop.wait(TICK):
            with self._lock:
                if self.live_line:
                    self._draw()
                else:
                    self._progress()

    def _progress(self) -> None:
        """A whole line for each exercise whose current check has run for a while."""
        now = time.monotonic()
        for ex_id, what in sorted(self._running.items()):
            spent = now - self._since.get(ex_id, now)
            if spent >= PROGRESS_AFTER and now - self._said.get(ex_id, -PROGRESS_EVERY) >= PROGRESS_EVERY:
                doing = what if what.startswith("importing") else f"checking {what}"
                self.stream.write(f"  … {ex_id}: {doing}, {spent:.0f} s so far\n")
                self.stream.flush()
                self._said[ex_id] = now

    def _clear(self) -> None:
        if self._shown:
            self.stream.write("\r\x1b[K")
            self._shown = False

    def _draw(self) -> None:
        if not self.live_line or self._stop.is_set() or not self._running:
            return
        doing = ", ".join(f"{ex}: {what}" for ex, what in sorted(self._running.items()))
        text = f"  … {time.monotonic() - self._start:5.1f}s  {doing}"
        width = shutil.get_terminal_size((100, 20)).columns - 1  # a wrapped line could not be erased
        self.stream.write("\r\x1b[K" + text[:width])
        self.stream.flush()
        self._shown = True
