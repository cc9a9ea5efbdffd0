"""Detect learner code that rewrites the tools the graders compare with.

A module that, say, replaces `np.allclose` with `lambda *a, **k: True` could otherwise turn
every numeric check green. The graders keep their own references to what they use, and the
child compares these namespaces before and after the learner's code runs: any replaced or
deleted attribute voids the exercise.
"""

import sys


def _namespaces() -> dict[str, dict]:
    import builtins
    import math
    import operator

    import numpy as np
    import numpy.testing

    spaces = {"builtins": vars(builtins), "math": vars(math), "operator": vars(operator),
              "numpy": vars(np), "numpy.testing": vars(numpy.testing)}
    if "jax" in sys.modules:
        import jax
        import jax.numpy as jnp
        # The class of every jax.Array, named rather than made: making one would start a JAX
        # backend, and graders/kit/figure_store.py forks only while there is none.
        from jax._src.array import ArrayImpl

        spaces.update({"jax": vars(jax), "jax.numpy": vars(jnp), "jax.lax": vars(jax.lax),
                       "jax.tree": vars(jax.tree), "jax.tree_util": vars(jax.tree_util),
                       "jax.Array": dict(vars(ArrayImpl)),
                       "numpy.ndarray": dict(vars(np.ndarray))})
    if "pytest" in sys.modules:
        spaces["pytest"] = vars(sys.modules["pytest"])
    for name, module in list(sys.modules.items()):
        if name == "graders" or name.startswith("graders."):
            spaces[name] = vars(module)
            # and each class the module defines: a method replaced on the class (say, how a
            # forked process's messages are read) is as much a replacement as a function's
            for attr, value in list(vars(module).items()):
                if isinstance(value, type) and value.__module__ == name:
                    spaces[f"{name}.{attr}"] = dict(vars(value))
    return spaces


class Snapshot(dict):
    """{(namespace, name): id of its value}, with the names that count grouped by namespace
    (`watched`: namespace -> (names, ids), in order). A worker compares after every probe call
    against the same snapshot: grouped once, a comparison is one list of ids per namespace (0.5 ms
    where building a whole new snapshot took 1.4). Module-level mutable state that legitimately
    changes is not part of the contract; only functions and classes matter, and their ids do not
    move on their own."""

    def __init__(self, ids: dict[tuple[str, str], int]):
        super().__init__(ids)
        grouped: dict[str, tuple[list, list]] = {}
        for (space, attr), ident in ids.items():
            if not attr.startswith("__") and space not in _VOLATILE.get(attr, ()):
                attrs, idents = grouped.setdefault(space, ([], []))
                attrs.append(attr)
                idents.append(ident)
        self.watched = {space: (tuple(attrs), idents) for space, (attrs, idents) in grouped.items()}


def snapshot() -> Snapshot:
    return Snapshot({(space, attr): id(value)
                     for space, d in _namespaces().items() for attr, value in list(d.items())})


def replaced(before: dict[tuple[str, str], int]) -> list[str]:
    """Names from `before` that now point at another object or are gone."""
    watched = before.watched if isinstance(before, Snapshot) else Snapshot(before).watched
    spaces = _namespaces()
    gone = object()  # in no namespace of `before`: a name deleted since reads as this
    changed = []
    for space, (attrs, ids) in watched.items():
        names = spaces.get(space, {})
        now = [id(names.get(attr, gone)) for attr in attrs]
        if now != ids:  # the rare case: say which
            changed += [f"{space}.{attr}" for attr, was, new in zip(attrs, ids, now) if was != new]
    return sorted(changed)


# Attributes that the libraries themselves reassign during normal use.
_VOLATILE: dict[str, tuple[str, ...]] = {}
