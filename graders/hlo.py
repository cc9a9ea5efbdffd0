"""Counting collectives in compiled HLO text."""

import re

import numpy as np

COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")

# An instruction's opcode is followed by "(" and, for async pairs, spelled "<op>-start(";
# operand names such as %all-gather.3 never are, and "-done" halves are not counted twice.
_OPCODE = re.compile(r"(?<![%\w.-])(" + "|".join(COLLECTIVES) + r")(?:-start)?\(")


def collective_counts(hlo_text: str) -> dict[str, int]:
    counts = dict.fromkeys(COLLECTIVES, 0)
    for match in _OPCODE.finditer(hlo_text):
        counts[match.group(1)] += 1
    return counts


# "%name = f32[16,24]{1,0} all-reduce(" or, for a tuple, "= (f32[2], f32[3,4]) all-reduce-start(".
_RESULT = re.compile(r"=\s*(\(?[^=]*?\)?)\s+(" + "|".join(COLLECTIVES) + r")(?:-start)?\(")
_ARRAY = re.compile(r"\w+\[([\d,]*)\]")


def collective_sizes(hlo_text: str, op: str) -> list[int]:
    """For every `op` instruction (e.g. "all-reduce"), the element count of its largest result:
    tells a scalar loss being averaged from a whole weight gradient being summed."""
    sizes = []
    for match in _RESULT.finditer(hlo_text):
        if match.group(2) == op:
            counts = [int(np.prod([int(d) for d in dims.split(",") if d])) for dims in _ARRAY.findall(match.group(1))]
            sizes.append(max(counts, default=1))
    return sizes
