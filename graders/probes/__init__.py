"""Each exercise's probes: the only grader code that calls the learner's (see graders/worker.py).

A probe takes the learner's module and plain data, and returns plain data. It may fail or mark a
check not attempted itself (graders.learner.fail, NotAttempted) when what came back cannot be
sent, but it never knows an expected value: those stay with the checks, in the judge.
"""
