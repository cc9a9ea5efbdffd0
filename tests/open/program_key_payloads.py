"""Forged payloads with PRNG keys that graders/kit/program.decode accepts although the judge cannot
run them (not collected by `make test`; run with `python -m pytest tests/open/program_key_payloads.py`).

decode type-checks a rebuilt program with jax.core.check_jaxpr, and its docstring promises that a
program it accepts is one the judge can compile. A worker can send a program that applies argmax,
argmin, reduce_max, reduce_min or sort to a key array (its types changed from float32 to
key<threefry2x32> in the message, its constant sent as key data): JAX's shape and dtype rules for
those primitives accept an extended dtype, so decode returns a Program, and only compiling it raises,
with a ValueError or TypeError, not a ProgramError. No judge crashes: under --sandbox a module that
swaps ex1's traced_program for such a payload (its real gradient plus argmax of a key array) loses
accumulates_with_lax_scan and nothing_outside_the_scan_touches_the_whole_batch (8/16 at seed 20261130,
both modes), but the message is "could not check what your code returned: ValueError: Unsupported
dtype for max: key<fry>. Hint: compare the types and shapes you return with the docstring", which
points the learner at their return value rather than at a program the grader refused.
What should happen: decode raises ProgramError("... a PRNG key where numbers are expected ...")
(or any ProgramError), e.g. by refusing an equation other than random_*, the structural primitives
(reshape, slicing, gather, scatter, concatenate, select_n, broadcast, transpose, copy, eq/ne) and
the loop and call primitives whose operands hold a key.
"""

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from grading import ROOT  # noqa: F401  (puts the package on the path)
from graders.kit import program, wire

KEY = "key<threefry2x32>"


def as_keys(message):
    """The message with every float32 value made a threefry key (its constants as key data)."""
    message = copy.deepcopy(message)

    def walk(o):
        if isinstance(o, list):
            if len(o) >= 3 and isinstance(o[0], list) and o[1] == "float32" and isinstance(o[2], bool):
                o[1] = KEY
            if len(o) == 2 and isinstance(o[1], np.ndarray) and o[1].dtype == np.float32:
                o[1] = {"key": ["threefry2x32", np.zeros((*o[1].shape, 2), np.uint32)]}
            for v in o:
                walk(v)
        elif isinstance(o, dict):
            for v in o.values():
                walk(v)

    walk(message)
    return message


ON_KEYS = {
    "argmax": lambda a: jnp.argmax(a),
    "argmin": lambda a: jnp.argmin(a),
    "reduce_max": lambda a: lax.reduce_max_p.bind(a, axes=(0,), out_sharding=None),
    "reduce_min": lambda a: lax.reduce_min_p.bind(a, axes=(0,), out_sharding=None),
    "sort": lambda a: jnp.sort(a),
}


@pytest.mark.parametrize("name", sorted(ON_KEYS))
def test_numbers_only_primitive_on_a_key_is_refused_by_decode(name):
    message = wire.round_trip(program.encode(jax.make_jaxpr(ON_KEYS[name])(jnp.ones(3, jnp.float32))))
    forged = as_keys(message)
    keys = jax.random.split(jax.random.key(0), 3)
    try:
        rebuilt = program.decode(forged)
    except program.ProgramError:
        return  # what should happen
    with pytest.raises(Exception) as raised:
        rebuilt.run(keys)
    pytest.fail(f"decode accepted {name} of a key array; running it raised {type(raised.value).__name__}: "
                f"{str(raised.value)[:120]}")
