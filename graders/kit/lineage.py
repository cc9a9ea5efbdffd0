"""Two facts about this process that decide whether, and how, another may be forked from it.
Apart from kit/forked.py (which needs NumPy for its messages) so that the runner, which forks
the grading processes and imports no NumPy or JAX, starts in a few tens of milliseconds."""

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def backend_started() -> bool:
    """Whether this process has a JAX backend: forking it then is unsafe."""
    if "jax" not in sys.modules:
        return False
    from jax._src import xla_bridge

    return bool(xla_bridge._backends)


def follow_parent(parent: int) -> None:
    """SIGTERM to this process when `parent` (its parent now) dies, or at once if it has."""
    if _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        raise OSError("prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)
