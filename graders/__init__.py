"""Graders for the large-scale JAX training exercises.

`python -m graders` runs them (see runner.py); each `test_<module>.py` grades one exercise.
Shared checks live in numeric.py (comparisons), jaxpr.py (primitives and scans), hlo.py
(collectives), memory.py (compiled memory figures) and learner.py (loading and blaming).
"""
