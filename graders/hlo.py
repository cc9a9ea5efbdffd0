"""Counting collectives in compiled HLO text."""

import re

COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")

# An instruction's opcode is followed by "(" and, for async pairs, spelled "<op>-start(";
# operand names such as %all-gather.3 never are, and "-done" halves are not counted twice.
_OPCODE = re.compile(r"(?<![%\w.-])(" + "|".join(COLLECTIVES) + r")(?:-start)?\(")


def collective_counts(hlo_text: str) -> dict[str, int]:
    counts = dict.fromkeys(COLLECTIVES, 0)
    for match in _OPCODE.finditer(hlo_text):
        counts[match.group(1)] += 1
    return counts
