# --- attack kit (tests/attacks/kit.py) ---
import os as _os
import sys as _sys

_CHECKS = {checks!r}  # module -> its check names, as the package's grader files declare them
_MODULE = __name__
_NAMES = _CHECKS.get(_MODULE, [])
_GRADER = "graders.exercises." + _MODULE + ".checks"
# --- attack ---
