"""Counting collectives in compiled HLO text."""

import re
from typing import NamedTuple

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


# "replica_groups={{0,1},{2,3}}", or in XLA's iota form "replica_groups=[2,4]<=[4,2]T(1,0)": the
# groups of (logical) devices a collective runs over; "{}" is one group of every device.
_GROUPS_LISTED = re.compile(r"replica_groups=\{((?:\{[\d,]*\},?)*)\}")
_GROUPS_IOTA = re.compile(r"replica_groups=\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")
# XLA's mesh form: "replica_groups=mesh['data'=4,'model'=2] {'model'}", the groups along the axes named.
_GROUPS_MESH = re.compile(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}")
_PAIRS = re.compile(r"source_target_pairs=\{((?:\{[\d,]*\},?)*)\}")


def _groups(line: str, devices: int):
    """The device groups one collective instruction's line names: a tuple of tuples of logical
    device ids, or None where the line names none this reader knows."""
    on_mesh = _GROUPS_MESH.search(line)
    if on_mesh:
        axes = [(name, int(n)) for name, n in re.findall(r"'([^']*)'\s*=\s*(\d+)", on_mesh.group(1))]
        over = re.findall(r"'([^']*)'", on_mesh.group(2))
        names = [name for name, _ in axes]
        if not axes or any(name not in names for name in over):
            return None
        ids = np.arange(int(np.prod([n for _, n in axes]))).reshape([n for _, n in axes])
        kept = [i for i, name in enumerate(names) if name not in over]
        summed = [names.index(name) for name in over]
        width = int(np.prod([axes[i][1] for i in summed]))
        return tuple(tuple(int(i) for i in row) for row in ids.transpose(kept + summed).reshape(-1, width))
    iota = _GROUPS_IOTA.search(line)
    if iota:
        shape, dims = ([int(n) for n in g.split(",") if n] for g in iota.group(1, 2))
        ids = np.arange(int(np.prod(dims))).reshape(dims)
        if iota.group(3):
            ids = ids.transpose([int(n) for n in iota.group(3).split(",") if n])
        return tuple(tuple(int(i) for i in row) for row in ids.reshape(shape[0], -1))
    listed = _GROUPS_LISTED.search(line) or _PAIRS.search(line)
    if listed is None:
        return None
    groups = tuple(tuple(int(i) for i in g.split(",") if i) for g in re.findall(r"\{([\d,]*)\}", listed.group(1)))
    if listed.re is _PAIRS:  # a permute: each pair is a group of the devices it joins
        return groups
    return groups or (tuple(range(devices)),)


def collective_groups(hlo_text: str, devices: int) -> list[tuple[str, tuple[int, ...], tuple | None, int]]:
    """(opcode, result shape, device groups, times run) of every collective in compiled HLO text,
    one row per result as collective_shapes: over which devices each was summed or gathered, and
    how often the program runs it (the trips XLA knows of every while loop around it; 1 outside
    loops)."""
    comps = hlo_computations(_TUPLE_INDEX.sub("", hlo_text))
    times: dict = {}

    def visit(comp: str, n: int, seen: tuple) -> None:
        times[comp] = times.get(comp, 0) + n
        for op in comps.get(comp, []):
            for sub in op.called:
                if sub not in seen:
                    visit(sub, n * loop_trips(comps, op) if op.opcode == "while" else n, seen + (sub,))

    visit("ENTRY", 1, ("ENTRY",))
    rows = []
    for comp, ops in comps.items():
        for op in ops:
            name = op.opcode.removesuffix("-start")
            if name in COLLECTIVES:
                groups = _groups(op.attrs, devices)
                rows += [(name, tuple(int(d) for d in dims.split(",") if d), groups, max(times.get(comp, 1), 1))
                         for dims in _SHAPE.findall(op.kind)]
    return rows


# ---- compiled HLO text parsed into computations (ex9's dataflow, ex7's FLOPs through loops) -----

# "[ROOT] %name = type opcode(operands), attributes" in compiled HLO text; a computation opens with
# "[ENTRY] %name (parameters) -> type {" and closes with "}".
_HLO_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(.*->.*\{\s*$")
_HLO_INSTRUCTION = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(.+?)\s+([a-z][\w\-]*)\((.*)$")
_HLO_NAME = re.compile(r"%([\w.\-]+)")
_HLO_ARRAY = re.compile(r"\w+\[([\d,]*)\]")
_HLO_CALLED = re.compile(r"\b(?:calls|to_apply|body|true_computation|false_computation)=%([\w.\-]+)")
_HLO_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_HLO_TRIPS = re.compile(r'"known_trip_count":\{"n":"(\d+)"')
_HLO_ARG = re.compile(r'op_name="args\[(\d+)\]"')


class HloOp(NamedTuple):
    name: str
    root: bool
    kind: str  # the result's type
    opcode: str
    operands: tuple
    called: tuple
    args: str
    attrs: str


def hlo_computations(text: str) -> dict:
    """{computation: [HloOp]} of compiled HLO text; the entry computation under "ENTRY"."""
    out, current = {}, None
    for line in text.splitlines():
        head = _HLO_COMPUTATION.match(line)
        if head:
            current = "ENTRY" if head.group(1) else head.group(2)
            out[current] = []
            continue
        if current is None or line == "}":
            current = None
            continue
        found = _HLO_INSTRUCTION.match(line)
        if not found:
            continue
        root, name, kind, opcode, rest = found.groups()
        end = rest.find(")")  # operands are names (or a number): no parenthesis inside
        end = len(rest) if end < 0 else end
        args, attrs = rest[:end], rest[end + 1:]
        called = _HLO_CALLED.findall(attrs) if "=%" in attrs else []
        if "branch_computations" in attrs:
            called += _HLO_NAME.findall(_HLO_BRANCHES.search(attrs).group(1))
        out[current].append(HloOp(name, bool(root), kind, opcode, tuple(_HLO_NAME.findall(args)),
                                  tuple(called), args, attrs))
    return out


def parsed_collective_counts(comps: dict) -> dict:
    """collective_counts, read from hlo_computations' parse (an async pair once): for a grader
    that parses the program anyway, without the text's second reading."""
    counts = dict.fromkeys(COLLECTIVES, 0)
    for ops in comps.values():
        for op in ops:
            kind = op.opcode.removesuffix("-start")
            if kind in counts:
                counts[kind] += 1
    return counts


def known_trips(op: HloOp) -> int:
    """The trip count XLA knows for a while loop (every scan and fori_loop of fixed bounds), or 1."""
    found = _HLO_TRIPS.search(op.attrs) if op.opcode == "while" else None
    return int(found.group(1)) if found else 1


def covering_trips(comps: dict, body: str, least: int = 1) -> int:
    """The trips a while loop whose trip count XLA does not know (a bound read from an array) needs
    to fill what it carries: a body that writes a slice of a carried array each trip
    (dynamic-update-slice, or a scatter), where the loop's result is the whole array, runs at least
    the array's size over the slice's times; an array the body computes whole needs one trip. The
    largest such ratio over the carried arrays (1 if none), read from slices of at least `least`
    values. A loop that updates a whole leaf chunk by chunk runs as many trips as it has chunks,
    whatever its bound is written as."""
    ops = comps.get(body, [])
    named = {op.name: op for op in ops}
    root = next((op for op in ops if op.root), None)
    if root is None or root.opcode != "tuple":
        return 1
    trips = 1
    for i, name in enumerate(root.operands):
        made = named.get(name)
        if made is None or (made.opcode == "get-tuple-element" and f"index={i}" in made.attrs):
            continue
        written = _written(comps, made, named)
        if written >= least:
            trips = max(trips, -(-elements(made) // written))
    return trips


def _written(comps: dict, op, named: dict) -> int:
    """How many values an operation writes into the array it gives back: a dynamic-update-slice's
    update, a scatter's updates (also as a fusion's root); 0 for any other operation."""
    if op.opcode == "fusion" and op.called:
        inner = comps.get(op.called[0], [])
        root = next((o for o in inner if o.root), None)
        return _written(comps, root, {o.name: o for o in inner}) if root is not None else 0
    at = {"dynamic-update-slice": 1, "scatter": 2}.get(op.opcode)
    if at is None or len(op.operands) <= at or op.operands[at] not in named:
        return 0
    return elements(named[op.operands[at]])


def elements(op) -> int:
    """How many values an operation's result holds (all of a tuple's arrays)."""
    return sum(int(np.prod([int(d) for d in dims.split(",") if d])) for dims in _HLO_ARRAY.findall(op.kind))


def trips_unknown(text: str) -> bool:
    """Whether compiled HLO text holds a while loop whose trip count XLA does not know (its trips
    are then loop_trips' estimate)."""
    return any(op.opcode == "while" and not _HLO_TRIPS.search(op.attrs)
               for ops in hlo_computations(text).values() for op in ops) if " while(" in text else False


def loop_trips(comps: dict, op: HloOp) -> int:
    """How many times a while loop runs its body: the trip count XLA knows, or, where it does not
    (a bound read from an array), the trips it needs to fill what it carries with slices of two
    values or more (covering_trips; a buffer of one number a trip, a loss per micro-batch or per
    row, may hold more slots than the loop fills)."""
    if _HLO_TRIPS.search(op.attrs) or not op.called:
        return known_trips(op)
    body = _HLO_BODY.search(op.attrs)
    return covering_trips(comps, body.group(1) if body else op.called[-1], least=2)


_HLO_BODY = re.compile(r"\bbody=%([\w.\-]+)")


_CONTRACTING = re.compile(r"lhs_contracting_dims=\{([\d,]*)\}")


def _dot_flops(op: HloOp, kinds: dict) -> float:
    """2 * result elements * contracted elements of a dot, from its result's type and its first
    operand's (`kinds`: the types of its computation's instructions, by name)."""
    result = _HLO_ARRAY.search(op.kind)
    lhs = _HLO_ARRAY.search(kinds.get(op.operands[0], "") if op.operands else "") or _HLO_ARRAY.search(op.args)
    contracting = _CONTRACTING.search(op.attrs)
    if not (result and lhs and contracting):
        return 0.0
    dims = [int(d) for d in lhs.group(1).split(",") if d]
    summed = [dims[int(i)] for i in contracting.group(1).split(",") if i and int(i) < len(dims)]
    return 2.0 * float(np.prod([int(d) for d in result.group(1).split(",") if d])) * float(np.prod(summed))


def uncounted_loop_flops(text: str) -> float:
    """The matmul FLOPs of compiled HLO text that XLA's cost analysis leaves out: it counts a while
    loop's body once, where the loop runs it for every trip XLA knows of. Each dot inside a loop
    (through fusions, calls and nested loops) adds its FLOPs times (trips of its enclosing loops
    - 1). 0.0 for a program without loops; elementwise work in a loop's body is not added (small
    beside its matmuls)."""
    if " while(" not in text:
        return 0.0
    comps = hlo_computations(text)

    def run(comp: str, times: int, seen: tuple) -> float:
        missing, ops = 0.0, comps.get(comp, [])
        kinds = {op.name: op.kind for op in ops}
        for op in ops:
            if op.opcode == "dot" and times > 1:
                missing += (times - 1) * _dot_flops(op, kinds)
            for sub in op.called:
                if sub not in seen:  # no computation calls itself; a guard against a malformed text
                    missing += run(sub, times * loop_trips(comps, op) if op.opcode == "while" else times, seen + (sub,))
        return missing

    return run("ENTRY", 1, ("ENTRY",))
