"""Calls asked ahead (graders/child/probe_channel.py): without --sandbox each is made when asked, in
order, and what it raised is raised when its reply is read; under --sandbox the replies are read in
the order the calls were sent. A call asked to overlap is sent under --sandbox, and not made without it."""

import socket
import threading
import types
from pathlib import Path

import pytest

from graders.child import probe_channel
from graders.kit import verdicts, wire
from graders.kit.probing import probe


def probes_of(made: list):
    @probe
    def double(sol, x):
        made.append(x)
        if x < 0:
            verdicts.fail(f"double({x}) is negative")
        return 2 * x

    return types.SimpleNamespace(double=double)


def test_without_sandbox_a_call_asked_ahead_is_made_when_asked_and_raises_when_read():
    made = []
    local = probe_channel.Local(probes_of(made), None, Path("."), 10.0)
    reads = [local.ahead("double", (x,), {}) for x in (1, -2, 3)]
    assert made == [1, -2, 3]  # all made, in order, before any reply is read
    assert reads[0]() == 2
    with pytest.raises(verdicts.Verdict, match=r"double\(-2\) is negative"):
        reads[1]()
    assert reads[2]() == 6
    assert local.overlapped("double", (5,), {}) is None and made == [1, -2, 3]  # no call made


def test_under_sandbox_replies_are_read_in_the_order_the_calls_were_sent():
    judge, worker = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    made = []
    probes = probes_of(made)

    def serve():
        while True:
            try:
                request = wire.receive(worker)
            except (EOFError, OSError, wire.WireError):
                return
            wire.send_encoded(worker, probe_channel.run_probe(probes, None, Path("."), 10.0, request))

    threading.Thread(target=serve, daemon=True).start()
    remote = probe_channel.Remote(judge, 0)
    try:
        reads = [remote.ahead("double", (x,), {}) for x in (1, -2, 3)]
        assert reads[2]() == 6  # read last first: the replies before it wait, unread no more
        with pytest.raises(verdicts.Verdict, match=r"double\(-2\) is negative"):
            reads[1]()
        assert reads[0]() == 2
        assert remote.call("double", (4,), {}) == 8
        assert remote.overlapped("double", (5,), {})() == 10
        assert made == [1, -2, 3, 4, 5]
    finally:
        remote.close()
        judge.close()
        worker.close()
