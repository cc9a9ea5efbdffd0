"""A job run in a process forked from this one, handing back plain data (graders/kit/wire.py) one
message at a time.

Tracing a program holds the GIL, so a thread cannot take it off a process's path: another
process can, on the other CPU. Forking is safe only while this process has no JAX backend (a
backend starts threads and holds device state), nor while another thread runs (a lock it held
would stay held in the forked process), so `Forked.start` forks only then, and says so;
the caller does the work itself otherwise. The forked process keeps no descriptor of this one's
but its pipe, runs none of this one's signal handlers, and ends when this one does.
"""

import os
import signal
import struct
import threading
from collections.abc import Callable, Iterator

from graders.kit import wire
from graders.kit.lineage import backend_started, follow_parent

_HEADER = struct.Struct(">Q")


class Forked:
    """A forked process running job(), a generator of plain data; message(i) is its i-th."""

    def __init__(self, pid: int, pipe):
        self.pid, self._pipe = pid, pipe
        self._messages: list = []
        self._cond = threading.Condition()
        self._reading = False  # some thread is reading the pipe: the others wait for what it reads

    @classmethod
    def start(cls, job: Callable[[], Iterator]) -> "Forked | None":
        """Fork a process that sends every message job() yields, then ends; None (and nothing
        forked) when this process already has a JAX backend, or another thread (one that held
        a lock at the fork would leave it held for good in the forked process)."""
        if backend_started() or threading.active_count() > 1:
            return None
        read_end, write_end = os.pipe()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            _serve(job, write_end, parent)
        os.close(write_end)
        return cls(pid, os.fdopen(read_end, "rb"))

    def message(self, index: int):
        """The index-th message, waiting for it; None when the process ended before sending it."""
        with self._cond:
            while len(self._messages) <= index and self._pipe is not None:
                if self._reading:
                    self._cond.wait()
                    continue
                self._reading, pipe = True, self._pipe
                self._cond.release()
                message = None
                try:
                    message = _read(pipe)
                except wire.WireError:
                    pass  # not a message this module sends: read as the end of the pipe
                finally:
                    # No message: the pipe ended, or the read was cut short (a check's time
                    # limit) and the pipe lost its place. Either way nothing more is read from
                    # it, and the checks compute what they still need.
                    self._cond.acquire()
                    self._reading = False
                    if message is None:
                        self._close()
                    else:
                        self._messages.append(message)
                    self._cond.notify_all()
            return self._messages[index] if index < len(self._messages) else None

    def _close(self) -> None:
        if self._pipe is not None:
            self._pipe.close()
            self._pipe = None

    def stop(self) -> None:
        """End the process, whatever it is doing, and reap it."""
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.pid = 0
        with self._cond:
            if not self._reading:
                self._close()


def _read(pipe):
    header = pipe.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    data = pipe.read(size)
    return wire.decode(data) if len(data) == size else None


def _serve(job, write_end: int, parent: int) -> None:
    try:
        os.closerange(3, write_end)
        os.closerange(write_end + 1, 1 << 16)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
            signal.signal(sig, signal.SIG_DFL)
        follow_parent(parent)
        with os.fdopen(write_end, "wb") as out:
            for message in job():
                data = wire.encode(message)
                out.write(_HEADER.pack(len(data)) + data)
                out.flush()
    except BaseException:
        import traceback

        traceback.print_exc()  # into the exercise's output; the reader sees the pipe end
    finally:
        os._exit(0)
