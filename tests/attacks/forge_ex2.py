"""Exercise 2 only: forged probe replies that are empty where the judge iterates over them.
traced_programs answers no program at all (the loss and gradient checks once looped over the
programs it sent, so none was checked), and best_group_size answers no k (the check zipped the grader's
configurations with the answers, so none was checked). A correct solution sends one program per
k asked for, and one answer per configuration.
exercises: ex2
"""
_probes = _sys.modules["graders.exercises." + _MODULE + ".probes"]


def _nothing(sol, *args, **kwargs):
    return []


_nothing.is_probe = True
_probes.traced_programs = _nothing
_probes.best_group_size = _nothing
