"""The mark of a probe: a function of an exercise's probes.py that the checks may call, as
`worker.name(*args)`, where the learner's code runs (graders/child/probe_channel.py)."""


def probe(fn):
    """Mark fn(sol, *args) as callable by the checks."""
    fn.is_probe = True
    return fn
