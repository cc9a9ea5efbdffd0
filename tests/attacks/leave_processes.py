"""Leaves processes behind: double-forked, setsid, ignoring SIGTERM and SIGHUP, each forking
again when its child dies. None may be alive when the run ends. They give up after 15 s.
"""
import signal as _signal
import time as _time


def _linger():
    for sig in (_signal.SIGTERM, _signal.SIGHUP, _signal.SIGINT):
        _signal.signal(sig, _signal.SIG_IGN)
    end = _time.monotonic() + 15
    while _time.monotonic() < end:
        _time.sleep(0.1)


for _ in range(3):
    if _os.fork() == 0:
        try:
            _os.setsid()
            if _os.fork() == 0:
                _linger()
        finally:
            _os._exit(0)
