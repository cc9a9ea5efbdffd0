"""Results as they come: each exercise's row the moment it is graded, and on a terminal one
live line saying which exercise and check is running. In a pipe (CI logs, an editor, a
notebook cell) only whole lines are written, so nothing is left behind but the rows."""

import shutil
import sys
import threading
import time

from graders.app import report
from graders.runner.grading import ExerciseResult

TICK = 0.5  # seconds between redraws of the live line


class Live:
    def __init__(self, stream=None, live_line: bool | None = None):
        self.stream = stream or sys.stdout
        self.live_line = self.stream.isatty() if live_line is None else live_line
        self._lock = threading.Lock()
        self._running: dict[str, str] = {}  # exercise -> what it is doing
        self._start = time.monotonic()
        self._shown = False
        self._stop = threading.Event()
        if self.live_line:
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
            if kind == "importing":
                self._running[ex_id] = "importing your module"
            elif kind == "start":
                self._running[ex_id] = str(event.get("check", ""))
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
                self._draw()

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
