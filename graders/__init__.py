"""Graders for the large-scale JAX training exercises.

`python -m graders` grades (app/cli.py); each `exercises/<module>/` holds one exercise's checks and probes; the
catalog (catalog.py) describes every exercise once. From a notebook: `from graders import check`.
"""


def check(exercise, solutions="exercises", **options):
    """Grade an exercise from a notebook or a REPL; see graders/app/notebook.py."""
    from graders.app.notebook import check as _check

    return _check(exercise, solutions, **options)
