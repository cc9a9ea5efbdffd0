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


# "%name = f32[8,16]{1,0} all-gather(" or "(f32[4]{0}, f32[8]{0}) all-reduce(": the result type(s)
# of one collective instruction, then its opcode.
_RESULT = re.compile(r"=\s*(\([^=]*?\)|\w+\[[\d,]*\](?:\{[^}]*\})?)\s+(" + "|".join(COLLECTIVES) + r")(?:-start)?\(")
_SHAPE = re.compile(r"\w+\[([\d,]*)\]")
# XLA numbers every fifth element of a long tuple type: "(f32[16]{0}, ..., /*index=5*/f32[])".
_TUPLE_INDEX = re.compile(r"/\*index=\d+\*/")


def _instructions(hlo_text: str):
    """(opcode, [result shapes]) of every collective instruction."""
    for match in _RESULT.finditer(_TUPLE_INDEX.sub("", hlo_text)):
        yield match.group(2), [tuple(int(d) for d in dims.split(",") if d) for dims in _SHAPE.findall(match.group(1))]


def collective_shapes(hlo_text: str) -> list[tuple[str, tuple[int, ...]]]:
    """(opcode, result shape) of every collective in compiled HLO text, one row per result of
    a combined (tuple-valued) collective: says *what* was gathered or summed, not only how often."""
    return [(op, shape) for op, shapes in _instructions(hlo_text) for shape in shapes]


def collective_sizes(hlo_text: str, op: str) -> list[int]:
    """For every `op` instruction (e.g. "all-reduce"), the element count of its largest result:
    tells a scalar loss being averaged from a whole weight gradient being summed."""
    return [max((int(np.prod(shape)) for shape in shapes), default=1)
            for name, shapes in _instructions(hlo_text) if name == op]


def collective_elements(hlo_text: str, op: str) -> list[int]:
    """For every `op` instruction, the element count of all its results together: what a
    collective moved, whether one instruction moves one array or a combined tuple of several
    (read for synchronous collectives, as XLA compiles them on CPU)."""
    return [sum(int(np.prod(shape)) for shape in shapes) for name, shapes in _instructions(hlo_text) if name == op]
