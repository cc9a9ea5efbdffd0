"""Where the learner's code runs, and how a check reaches it.

A grader is split in two. Its checks (graders/exercises/<module>/checks.py) compute the expected values and
decide every verdict; they never call the learner's code. They ask the exercise's *probes*
(graders/exercises/<module>/probes.py) instead: small functions that call, trace or compile the learner's
code and return plain data (graders/kit/wire.py): arrays, numbers, strings, summaries of a traced
program.

Under `--sandbox` the probes run in a confined worker process (graders/child/sandbox.py) and the checks
in a trusted judge process that never imports the learner's module: code that patches its own
process can change only the data it sends back, and sending what a correct solution would send
is solving the exercise. Without `--sandbox` the probes run in the grading process itself
(`Local`), through the same encoding, so the verdicts are the same either way.
"""

import importlib
import os
import signal
import socket
from pathlib import Path

from graders import catalog
from graders.child import guard
from graders.kit import verdicts, wire

MAX_TAMPERED = 5  # names a worker may report replaced (the report shows as many)


def probe_module(ex_id: str):
    return importlib.import_module(catalog.probes_module(ex_id))


def before_solution(probes) -> None:
    """What an exercise's probes do before the learner's module is imported, if anything (ex10
    forks the process its restores run in, one that never ran the learner's save)."""
    hook = getattr(probes, "before_solution", None)
    if callable(hook):
        hook()


def run_probe(probes, solution, solutions_dir: Path, check_timeout: float, request) -> bytes:
    """The encoded reply to one request: {"value": ...}, or {"outcome", "message"} when the
    probe (or the learner's code under it) raised, classified here, next to the traceback."""
    try:
        name, args, kwargs = request["call"], request.get("args", []), request.get("kwargs", {})
        fn = getattr(probes, name, None)
        if not getattr(fn, "is_probe", False):
            return wire.encode({"outcome": "failed", "message": f"the grader asked for an unknown probe {name!r}"})
        value = fn(solution, *args, **kwargs)
        return wire.encode({"value": value})
    except BaseException as exc:  # the learner's SystemExit or KeyboardInterrupt too
        try:
            outcome, message = verdicts.classify(exc, solution, solutions_dir, check_timeout)
        except BaseException:  # e.g. a ProbeTimeout landing here
            outcome, message = "failed", "could not check what your code returned"
        return wire.encode({"outcome": outcome, "message": message})


class Tampered(Exception):
    """The worker found names the graders rely on replaced (graders/child/guard.py): the
    exercise is void, as it is when the same is found without --sandbox."""

    def __init__(self, names: list[str]):
        super().__init__(", ".join(names))
        self.names = names


def _tampered(reply) -> list[str] | None:
    if isinstance(reply, dict) and set(reply) == {"tampered"} and isinstance(reply["tampered"], list):
        return [str(n)[:200] for n in reply["tampered"][:MAX_TAMPERED]] or ["a name"]
    return None


def _answer(reply) -> object:
    """The value of a reply, or the Verdict it carries. A reply in any other shape came from a
    worker that did not run our code: it fails the check."""
    names = _tampered(reply)
    if names is not None:
        raise Tampered(names)
    if isinstance(reply, dict) and set(reply) == {"value"}:
        return reply["value"]
    if (isinstance(reply, dict) and set(reply) == {"outcome", "message"}
            and reply["outcome"] in ("failed", "not_attempted") and isinstance(reply["message"], str)):
        raise verdicts.Verdict(reply["outcome"], reply["message"][:2000])
    raise verdicts.Verdict("failed", "the process running your code sent back something no probe sends")


class Local:
    """Probes run in this process (no --sandbox): learner code shares it, as it always did."""

    def __init__(self, probes, solution, solutions_dir: Path, check_timeout: float):
        self.probes, self.solution = probes, solution
        self.solutions_dir, self.check_timeout = solutions_dir, check_timeout

    def call(self, name: str, args: tuple, kwargs: dict):
        request = wire.round_trip({"call": name, "args": list(args), "kwargs": kwargs})
        return _answer(wire.decode(run_probe(self.probes, self.solution, self.solutions_dir,
                                             self.check_timeout, request)))

    def ahead(self, name: str, args: tuple, kwargs: dict):
        """The call, made now (Remote.ahead); what it raises is raised when its reply is read.
        Made now, not when read: a check that asks for several calls ahead gets them in the
        order a single call would make them, and in this process nothing runs them meanwhile."""
        try:
            value = self.call(name, args, kwargs)
        except Exception as exc:  # a Verdict (or Tampered) about the learner's code
            error = exc  # `exc` itself is unbound once the except clause ends

            def raised():
                raise error
            return raised
        return lambda: value

    def overlapped(self, name: str, args: tuple, kwargs: dict):
        """None, and no call made (Remote.overlapped): in this process nothing runs a call while
        the check works, so the check makes it when it needs the reply, as it would without asking."""
        return None

    def close(self) -> None:
        pass


class Remote:
    """Probes run in a confined worker, reached over a socket. `waiter` is the process outside
    the worker's PID namespace: signalled, it kills the namespace and all it holds."""

    def __init__(self, sock: socket.socket, waiter: int):
        self.sock, self.waiter, self.lost = sock, waiter, ""
        self.unread: list[dict] = []  # requests sent whose replies are not read yet, in order
        self._sender = None  # sends, in order, the requests made while replies are unread (ahead())

    def start(self) -> dict:
        """The worker's first word: {"ready": True} or {"import_error": message}."""
        try:
            first = wire.receive(self.sock)
        except (EOFError, OSError, wire.WireError) as exc:
            return {"import_error": f"the process that imports your module ended before it was ready ({exc})"}
        if isinstance(first, dict) and first.get("ready") is True:
            return {"ready": True}
        if isinstance(first, dict) and isinstance(first.get("sandbox_error"), str):
            return {"sandbox_error": first["sandbox_error"][:2000]}
        if isinstance(first, dict) and isinstance(first.get("import_error"), str):
            return {"import_error": first["import_error"][:2000]}
        names = _tampered(first)
        if names is not None:
            return {"tampered": names}
        return {"import_error": "the process that imports your module sent back something unreadable"}

    def call(self, name: str, args: tuple, kwargs: dict):
        return self.ahead(name, args, kwargs)()

    def ahead(self, name: str, args: tuple, kwargs: dict):
        """Send the request now; the function returned reads its reply (the value, or the Verdict
        it carries). The worker answers requests in the order they came, so a check can work on
        one reply while the worker runs the next request. While earlier replies are unread, a
        request is sent by a thread of its own (after those before it): the judge never waits to
        send while the worker waits for it to read a reply, whatever their sizes."""
        if self.lost:
            return self._lost_reply
        try:
            data = wire.encode({"call": name, "args": list(args), "kwargs": kwargs})
            if self.unread:
                if self._sender is None:
                    from concurrent.futures import ThreadPoolExecutor

                    self._sender = ThreadPoolExecutor(max_workers=1)
                self._sender.submit(self._send_quietly, data)
            else:  # the worker waits for a request, and reads this one whole
                wire.send_encoded(self.sock, data)
        except (EOFError, OSError, wire.WireError) as exc:
            self._lose(f"not checked: the process running your code ended or sent back something "
                       f"unreadable ({exc}). Hint: your code may call os._exit or crash the interpreter.")
            raise verdicts.Verdict("failed", self.lost) from None
        except BaseException:  # stopped while the worker did not take the request
            self._lose("not checked: your code was still running when an earlier check ran out of time.")
            raise
        ticket: dict = {}
        self.unread.append(ticket)
        return lambda: self._reply(ticket)

    def overlapped(self, name: str, args: tuple, kwargs: dict):
        """ahead(): the call sent now, its reply read by the function returned (Local.overlapped
        makes no call)."""
        return self.ahead(name, args, kwargs)

    def _send_quietly(self, data: bytes) -> None:
        try:
            wire.send_encoded(self.sock, data)
        except OSError:
            pass  # the worker is gone: reading the reply says so

    def _lost_reply(self):
        raise verdicts.Verdict("failed", self.lost)

    def _reply(self, ticket: dict):
        while "reply" not in ticket:
            if self.lost:
                raise verdicts.Verdict("failed", self.lost)
            try:
                reply = wire.receive(self.sock)
            except (EOFError, OSError, wire.WireError) as exc:
                self._lose(f"not checked: the process running your code ended or sent back something "
                           f"unreadable ({exc}). Hint: your code may call os._exit or crash the interpreter.")
                raise verdicts.Verdict("failed", self.lost) from None
            except BaseException:
                # The check ran out of time (or was stopped) while the learner's code was running:
                # that code may never return, so the worker goes, and later checks say why.
                self._lose("not checked: your code was still running when an earlier check ran out of time.")
                raise
            self.unread.pop(0)["reply"] = reply
        return _answer(ticket["reply"])

    def _lose(self, why: str) -> None:
        self.lost = why
        self.close()

    def close(self) -> None:
        """Kill the worker's namespace (everything the learner's code started) and wait for it."""
        if self._sender is not None:
            self._sender.shutdown(wait=False)
        if self.waiter <= 0:
            return
        try:
            self.sock.close()
        except OSError:
            pass
        try:
            os.kill(self.waiter, signal.SIGTERM)
            os.waitpid(self.waiter, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        self.waiter = 0


def serve(sock: socket.socket, ex_id: str, solutions_dir: Path, check_timeout: float) -> None:
    """The worker's loop, confined: import the probes and the learner's module, then answer
    requests until the judge closes the socket.

    The guard (graders/child/guard.py) watches here as it does in an unsandboxed child: a name the
    graders rely on (a probe, a shared helper, a library function) replaced by the learner's code,
    at import or while a probe runs, voids the exercise. That catches the plain replacement only:
    the learner's code shares this process, so what the judge believes of a reply must follow from
    something the judge computes itself (graders/kit/program.py)."""
    probes = probe_module(ex_id)
    before_solution(probes)
    before = guard.snapshot()  # after the probes' import, so that it covers them
    try:
        solution = verdicts.load_module(catalog.module_name(ex_id), solutions_dir)
    except BaseException as exc:
        wire.send(sock, {"import_error": verdicts.describe(exc, solutions_dir)})
        return
    changed = guard.replaced(before)
    if changed:
        wire.send(sock, {"tampered": changed[:MAX_TAMPERED]})
        return
    wire.send(sock, {"ready": True})

    def out_of_time(*_):
        raise verdicts.ProbeTimeout()

    signal.signal(signal.SIGALRM, out_of_time)
    while True:
        try:
            request = wire.receive(sock)
        except (EOFError, OSError, wire.WireError):
            return
        signal.setitimer(signal.ITIMER_REAL, check_timeout)
        try:
            reply = run_probe(probes, solution, solutions_dir, check_timeout, request)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        changed = guard.replaced(before)
        if changed:
            reply = wire.encode({"tampered": changed[:MAX_TAMPERED]})
        wire.send_encoded(sock, reply)
