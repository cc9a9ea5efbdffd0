"""The `@expected` mark: an exercise's own expected-value computation, which is the solution
written by the grader (ex2's grouped checkpoint, ex4's threshold, ex8's step and rule), and so
must not reach the students' copy.

    from graders.kit.expected import expected

    @expected
    def gradient_np(w, x):
        ...

A marked function is a module-level function of an exercise's folder (its checks.py or a helper
module beside it) whose result depends on its arguments alone (no closure, no global that
changes). Its three lives:

- the full package and the autograder: the mark returns the function unchanged;
- recording (`make release`, with GRADERS_RECORD_EXPECTED set to a folder): each call's
  arguments and result are written there as wire data (graders/kit/wire.py, no pickle), one
  file per call, since a call may run in a forked process (graders/kit/figure_store.py's ahead);
- the students' copy (a `public.wire` beside the function's file, written by the release):
  graders/course/bundle.py replaced the function's body by a line naming that file, and the mark
  answers each call from the calls recorded, keyed by its arguments. A call that was not
  recorded (an argument made from the learner's output, another seed than the public one)
  raises Deferred: the check reads "graded when you submit", neither passed nor failed.
"""

import collections
import dataclasses
import functools
import hashlib
import inspect
import os
from pathlib import Path

from graders import catalog, settings
from graders.kit import wire
from graders.kit.verdicts import Deferred

PUBLIC_FILE = "public.wire"  # beside the marked function's file, in the students' copy only

# The line that stands for a marked function's body in the students' copy (after its docstring).
BODY = "...  # the students' copy: answered from the values recorded in public.wire (graders/kit/expected.py)"

# What a check says when one of its expected values was not recorded.
ANOTHER_SEED = ("graded when you submit: this copy of the package holds the graders' expected values for the "
                "inputs they draw on its public seed ({public}), and this run used seed {seed}. "
                "Grade without --seed to check this here.")
FROM_YOUR_CODE = ("graded when you submit: this check needs an expected value of the graders' own for inputs "
                  "that were not drawn when this copy was made (they come from what your code returned), and "
                  "this copy holds only the values recorded then.")


def _plain(value):
    """value as wire data, keeping what wire alone would lose (sets, Counters) tagged."""
    if isinstance(value, collections.Counter):
        return {"__counter__": [[_plain(k), _plain(v)] for k, v in value.items()]}
    if isinstance(value, (set, frozenset)):
        return {"__set__": sorted((_plain(v) for v in value), key=repr)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return tuple(_plain(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value


def _unplain(value):
    if isinstance(value, dict) and set(value) == {"__counter__"}:
        return collections.Counter({_unplain(k): _unplain(v) for k, v in value["__counter__"]})
    if isinstance(value, dict) and set(value) == {"__set__"}:
        return {_unplain(v) for v in value["__set__"]}
    if isinstance(value, tuple):
        return tuple(_unplain(v) for v in value)
    if isinstance(value, list):
        return [_unplain(v) for v in value]
    if isinstance(value, dict):
        return {_unplain(k): _unplain(v) for k, v in value.items()}
    return value


def call_key(fn, args, kwargs) -> str:
    """The arguments of a call, bound to fn's parameters (defaults filled in), as a hash."""
    bound = inspect.signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    return hashlib.sha256(wire.encode(_plain(list(bound.arguments.items())))).hexdigest()


def name_of(fn) -> str:
    return fn.__qualname__


def _public_file(fn) -> Path:
    return Path(inspect.unwrap(fn).__code__.co_filename).resolve().parent / PUBLIC_FILE


@functools.cache
def _recorded(path: Path) -> dict:
    try:
        data = wire.decode(path.read_bytes())
    except OSError:
        return {}
    return data.get("calls", {})


def expected(fn):
    """Mark fn as an expected-value computation of the grader's own (see the module's docstring)."""
    public = _public_file(fn)
    if public.is_file():
        return _answered(fn, public)
    if not os.environ.get(settings.RECORD_EXPECTED):
        return fn

    @functools.wraps(fn)
    def recording(*args, **kwargs):
        value = fn(*args, **kwargs)
        folder = os.environ.get(settings.RECORD_EXPECTED)
        if folder:
            record(folder, fn, call_key(fn, args, kwargs), value)
        return value

    return recording


def record(folder: str, fn, key: str, value) -> None:
    """Write one call's result where the release reads it: <folder>/<exercise folder>/<name>/<key>."""
    try:
        data = wire.encode(_plain(value))
    except wire.WireError as exc:
        raise TypeError(f"@expected {name_of(fn)} returned a value the students' copy cannot hold: {exc}") from None
    where = Path(folder) / _public_file(fn).parent.name / name_of(fn)
    where.mkdir(parents=True, exist_ok=True)
    partial = where / f"{key}.{os.getpid()}.tmp"
    partial.write_bytes(data)
    os.replace(partial, where / key)


def collect(folder: Path) -> dict[str, bytes]:
    """{exercise folder name: the public.wire it gets}, from a recording folder."""
    out = {}
    for exercise in sorted(p for p in Path(folder).iterdir() if p.is_dir()):
        calls = {}
        for function in sorted(p for p in exercise.iterdir() if p.is_dir()):
            calls[function.name] = {key.name: wire.decode(key.read_bytes()) for key in sorted(function.iterdir())
                                    if not key.name.endswith(".tmp")}
        out[exercise.name] = wire.encode({"calls": calls})
    return out


def _answered(fn, public: Path):
    name = name_of(fn)

    @functools.wraps(fn)
    def answered(*args, **kwargs):
        calls = _recorded(public).get(name, {})
        try:
            key = call_key(fn, args, kwargs)
        except wire.WireError:
            key = None
        if key not in calls:
            public_seed, seed = catalog.public_seed(), settings.seed()
            if public_seed is not None and seed != public_seed:
                raise Deferred(ANOTHER_SEED.format(public=public_seed, seed=seed))
            raise Deferred(FROM_YOUR_CODE)
        return _unplain(calls[key])

    return answered


def or_else(compute, default):
    """compute(), or `default` where the students' copy holds no recorded value it needs: for work
    that only names a mistake a check has already found (the verdict stands, unnamed)."""
    try:
        return compute()
    except Deferred:
        return default


def recorded_ahead(compute) -> None:
    """When the release records (and only then), compute() now: marked work that only a wrong
    answer asks for (naming a mistake), so that the students' copy can name it too. The full
    package and the autograder do nothing here, and compute it only when they need it."""
    if os.environ.get(settings.RECORD_EXPECTED):
        compute()
