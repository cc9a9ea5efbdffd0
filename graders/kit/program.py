"""A traced program as plain data: the evidence a judge reads and runs itself (issue 31).

Under --sandbox the learner's code runs in a worker the judge cannot trust: a description the
worker sends ("a scan of length 4 does the work") can be forged by the learner's module. So the
worker sends the learner's *program* instead, its traced jaxpr written out as data (`encode`),
and the judge rebuilds it from its own whitelist of primitives (`decode`), evaluates it on its
own inputs and reads its structure with the analyses of graders/kit/jaxpr.py. A forged program
must then compute the right values (the judge checks them on the program it received) with the
technique (the judge reads it there), which is doing the exercise.

What a program holds, as data:
  * every variable's abstract value (shape, dtype, weak type): plain arrays only;
  * every equation: the primitive's name, its operands (variables or literals), its outputs,
    its parameters (numbers, strings, tuples, dtypes, nested programs recursively, and a few
    JAX objects by kind: enums, dimension numbers, flat-tree layouts, an empty mesh, a checkpoint
    policy by its name in jax.checkpoint_policies, an unsharded NamedSharding on an empty mesh by
    its rank), and the line of the learner's file it was
    written at (for messages: graders.kit.jaxpr.written_at reads it back);
  * the constants as arrays.
A custom_jvp or custom_vjp function is sent as a call of its primal program (`forward=True`, for
checks that only run a program forwards), or refused: its derivative rules are Python callables.

Decoding never runs code from the message: names are looked up in the judge's tables, anything
else is refused, sizes are bounded, and the rebuilt program is type-checked (jax's check_jaxpr:
every equation's shapes and parameters through the primitive's own rules) before anything
compiles it. A malformed program is a ProgramError, which a check turns into a failure.
"""

import enum
import functools
import math

import jax
import numpy as np
from jax._src import core, source_info_util
from jax._src import flattree
from jax._src.lax import slicing

MAX_EQUATIONS = 40_000  # in all, nested programs included: far above any exercise's program
MAX_CONST_BYTES = 64 << 20
MAX_NESTING = 24
# Elements of any one value: the judge runs what it rebuilds, so a program may not make an array
# that would exhaust its memory (the exercises' largest arrays hold a few thousand numbers).
MAX_ELEMENTS = 1 << 24

# Primitives a program may hold: what the exercises' programs are made of (elementwise math,
# shapes, indexing, reductions, products, control flow, calls, checkpoints). Nothing with effects
# (callbacks, prints, I/O) and nothing that reads outside its operands.
ALLOWED = frozenset("""
abs acos acosh add add_any and argmax argmin asin asinh atan atan2 atanh bitcast_convert_type
broadcast_in_dim cbrt ceil clamp closed_call concatenate cond convert_element_type copy copy_p cos cosh
cumlogsumexp cummax cummin cumprod cumsum digamma div dot_general dynamic_slice dynamic_update_slice
eq erf erf_inv erfc exp exp2 expand_dims expm1 floor ge gather gt imag integer_pow iota is_finite jit
le lgamma log log1p logistic lt max min mul name ne neg nextafter not optimization_barrier or pad pjit
one_minus_square population_count pow real reduce_and reduce_max reduce_min reduce_or reduce_precision reduce_prod reduce_sum
reduce_xor rem remat2 reshape rev round rsqrt scan scatter scatter-add scatter_add scatter-mul scatter_mul
scatter-min scatter-max select_n shift_left shift_right_arithmetic shift_right_logical sign sin sinh
slice sort split sqrt square squeeze stack stop_gradient sub tan tanh tile top_k transpose unstack while xor
""".split())

# What jax.debug.print binds: effects and no outputs. encode_with_policies leaves them out.
PRINTS = frozenset({"debug_print", "debug_callback"})

CUSTOM = frozenset({"custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr"})

# JAX objects a parameter may hold, by kind: the judge rebuilds them from these classes only.
_ENUMS = {cls.__name__: cls for cls in (slicing.GatherScatterMode, jax.lax.Precision, jax.lax.RoundingMethod)}
_TUPLES = {cls.__name__: cls for cls in (slicing.GatherDimensionNumbers, slicing.ScatterDimensionNumbers)}


@functools.cache
def _jit_defaults():
    """The enum of jit's `inline` parameter and the empty mesh a jit outside any mesh runs in,
    found where this JAX keeps them (traced once, when first needed)."""
    params = jax.make_jaxpr(jax.jit(lambda x: x))(np.float32(0)).eqns[0].params
    cls = type(params.get("inline"))
    if isinstance(cls, type) and issubclass(cls, enum.Enum):
        _ENUMS[cls.__name__] = cls
    return cls, params.get("ctx_mesh")


class ProgramError(ValueError):
    """A program that cannot be sent, or a message that is no program the judge rebuilds."""


def _policies() -> dict[str, object]:
    cp = jax.checkpoint_policies
    return {name: getattr(cp, name) for name in dir(cp)
            if not name.startswith("_") and callable(getattr(cp, name))
            and getattr(getattr(cp, name), "__module__", "").startswith("jax")}


def policy_name(policy) -> str | None:
    for name, known in _policies().items():
        if known is policy and not name.startswith("checkpoint_"):
            return name
    for name, known in _policies().items():
        if known is policy:
            return name
    return None


def said_name(obj) -> str:
    return getattr(obj, "__qualname__", None) or type(obj).__name__


# ---- encoding (the worker) ------------------------------------------------------------------

class _Encoder:
    def __init__(self, filename: str, forward: bool, policies: list | None = None):
        self.filename, self.forward = str(filename or ""), forward
        self.policies = policies  # encode_with_policies: the learner's own policies, by number
        self.drop_prints = policies is not None  # ... and jax.debug.print left out (PRINTS)
        self.count = 0
        self.table: list = []  # every program, each after the programs it holds (no nesting on the wire)
        self.done: dict = {}  # id(jaxpr) -> its index in table

    def aval(self, aval):
        if type(aval) is not core.ShapedArray:
            raise ProgramError(f"a value of kind {type(aval).__name__} ({aval}): only plain arrays are read")
        if aval.dtype.name not in _DTYPES:
            raise ProgramError(f"a value of dtype {aval.dtype}: only numeric arrays are read")
        return [list(int(n) for n in aval.shape), aval.dtype.name, bool(aval.weak_type)]

    def jaxpr(self, jaxpr, depth: int = 0) -> int:
        """jaxpr's index in the table, after every program it holds."""
        if id(jaxpr) in self.done:
            return self.done[id(jaxpr)]
        if depth > MAX_NESTING:
            raise ProgramError("programs nested too deeply")
        names: dict = {}

        def define(v):
            names[v] = len(names)
            return self.aval(v.aval)

        def atom(v):
            if isinstance(v, core.Literal):
                return {"lit": np.asarray(v.val, dtype=v.aval.dtype), "aval": self.aval(v.aval)}
            if v not in names:
                raise ProgramError("a variable used before it is defined")
            return names[v]

        consts = list(getattr(jaxpr, "consts", ()) or ())
        out = {"const": [], "in": [], "eqns": [], "out": None}
        for v, c in zip(jaxpr.constvars, consts):
            out["const"].append([define(v), np.asarray(c)])
        for v in jaxpr.constvars[len(consts):]:
            raise ProgramError("a program whose constants are not given")
        out["in"] = [define(v) for v in jaxpr.invars]
        for eqn in jaxpr.eqns:
            self.count += 1
            if self.count > MAX_EQUATIONS:
                raise ProgramError(f"more than {MAX_EQUATIONS} equations")
            if self.drop_prints and eqn.primitive.name in PRINTS and not eqn.outvars:
                continue  # a print returns nothing: the program computes the same without it
            if eqn.effects and not (self.drop_prints and all(type(e).__name__ == "DebugEffect" for e in eqn.effects)):
                raise ProgramError(f"{eqn.primitive.name} has effects ({', '.join(map(str, eqn.effects))})")
            name, params = eqn.primitive.name, eqn.params
            if name in CUSTOM:
                if not self.forward:
                    raise ProgramError(f"a {name.split('_call')[0]} function: its derivative rule is Python "
                                       "code, which is not sent")
                name, params = "jit", _as_jit(params, len(eqn.invars), len(eqn.outvars))
            elif name not in ALLOWED:
                raise ProgramError(f"the primitive {name!r}, which no exercise's program needs")
            ins = [atom(v) for v in eqn.invars]
            encoded = {k: self.param(v, depth) for k, v in sorted(params.items())}
            outs = [[self.aval(v.aval), isinstance(v, core.DropVar)] for v in eqn.outvars]
            for v in eqn.outvars:
                if not isinstance(v, core.DropVar):
                    names[v] = len(names)
            out["eqns"].append([name, ins, outs, encoded, self.line(eqn)])
        out["out"] = [atom(v) for v in jaxpr.outvars]
        self.table.append(out)
        self.done[id(jaxpr)] = len(self.table) - 1
        self._keep = getattr(self, "_keep", []) + [jaxpr]  # ids stay unique while encoding
        return len(self.table) - 1

    def line(self, eqn) -> int:
        """The line of the learner's file the equation was written at, 0 if none (or already
        carried by a program this one was rebuilt from)."""
        meta = getattr(eqn.ctx, "xla_metadata", None) or {}
        if LINE in meta:
            return int(meta[LINE])
        if not self.filename:
            return 0
        try:
            frames = list(source_info_util.user_frames(eqn.source_info.traceback))
        except Exception:  # no traceback kept
            return 0
        for frame in frames:
            if frame.file_name == self.filename:
                return int(frame.start_line)
        return 0

    def param(self, value, depth):
        if value is None or isinstance(value, (bool, int, float, str)) and not isinstance(value, enum.Enum):
            return value
        if isinstance(value, np.dtype):
            return {"dtype": value}
        if isinstance(value, (np.generic, np.ndarray)):
            return {"np": value}
        if isinstance(value, enum.Enum):
            _jit_defaults()
            if type(value).__name__ not in _ENUMS:
                raise ProgramError(f"a parameter of kind {type(value).__name__}")
            return {"enum": [type(value).__name__, value.name]}
        if type(value).__name__ in _TUPLES and isinstance(value, tuple):
            return {"nt": [type(value).__name__, [self.param(v, depth) for v in value]]}
        if isinstance(value, tuple):
            return {"tuple": [self.param(v, depth) for v in value]}
        if isinstance(value, list):
            return {"list": [self.param(v, depth) for v in value]}
        if isinstance(value, core.Jaxpr):
            return {"jaxpr": self.jaxpr(value, depth + 1)}
        if isinstance(value, flattree.FlatTree):
            return {"ft": self.flat(value, depth)}
        if isinstance(value, flattree.Either):
            return {"either": [value.is_right, self.param(value.val, depth)]}
        if type(value).__name__ == "UnspecifiedValue":
            return {"unspecified": 0}
        if isinstance(value, jax.sharding.NamedSharding):
            # a value's sharding as a backward pass states it (convert_element_type's transpose):
            # on an empty mesh, every axis unsharded, it says nothing but the rank
            mesh, spec = value.mesh, tuple(value.spec)
            if (mesh.axis_names or not isinstance(mesh, (jax.sharding.Mesh, jax.sharding.AbstractMesh))
                    or value.memory_kind is not None or any(p is not None for p in spec)):
                raise ProgramError("a program sharded over a mesh of devices, which this check does not read")
            return {"sharding": [type(mesh).__name__, len(spec)]}
        if isinstance(value, (jax.sharding.Mesh, jax.sharding.AbstractMesh)):
            if value.axis_names:
                raise ProgramError("a program on a mesh of devices, which this check does not read")
            return {"mesh": type(value).__name__}
        if callable(value):
            name = policy_name(value)
            if name is None and self.policies is not None:
                for number, known in enumerate(self.policies):
                    if known is value:
                        return {"custom_policy": number}
                self.policies.append(value)
                return {"custom_policy": len(self.policies) - 1}
            if name is None:
                raise ProgramError(f"a function ({said_name(value)}) in a parameter, e.g. a checkpoint policy "
                                   "of your own: only jax.checkpoint_policies are read")
            return {"policy": name}
        raise ProgramError(f"a parameter of kind {type(value).__name__}")

    def flat(self, tree, depth):
        if isinstance(tree, flattree.FTTuple):
            return {"tuple": [self.flat(e, depth) for e in tree.elts]}
        if isinstance(tree, flattree.FTSingleton):
            return {"one": self.param(tree.val, depth)}
        if isinstance(tree, flattree.FTFiltered):
            return {"filtered": self.flat(tree.val, depth)}
        if isinstance(tree, flattree.FTPyTree):
            # a scan's transpose states its layout as a tree of tuples and lists (a scan over a
            # model's stacked states, differentiated): sent as that skeleton, nothing else
            return {"pytree": [[self.param(x, depth) for x in tree.xs], _skeleton(tree.tree)]}
        raise ProgramError(f"a scan layout of kind {type(tree).__name__}")


class _Leaf:
    """Where a leaf stands in a tree's skeleton (_skeleton, _treedef)."""


def _skeleton(treedef, depth: int = 0):
    """A PyTreeDef made only of tuples, lists, dicts (string keys) and None, as plain data."""
    def walk(node, depth):
        if depth > MAX_NESTING:
            raise ProgramError("a scan layout nested too deeply")
        if isinstance(node, _Leaf):
            return {"leaf": 0}
        if node is None:
            return {"none": 0}
        if type(node) in (tuple, list):
            return {type(node).__name__: [walk(n, depth + 1) for n in node]}
        if type(node) is dict and all(isinstance(k, str) for k in node):
            return {"dict": [[k, walk(v, depth + 1)] for k, v in node.items()]}
        raise ProgramError(f"a scan layout holding a {type(node).__name__}")
    return walk(jax.tree_util.tree_unflatten(treedef, [_Leaf() for _ in range(treedef.num_leaves)]), depth)


def _treedef(data):
    """The PyTreeDef a skeleton stands for (the judge's side of _skeleton)."""
    def build(d, depth):
        if depth > MAX_NESTING or not (isinstance(d, dict) and len(d) == 1):
            raise ProgramError("a malformed scan layout")
        (kind, value), = d.items()
        if kind == "leaf" and value == 0:
            return _Leaf()
        if kind == "none" and value == 0:
            return None
        if kind in ("tuple", "list"):
            items = [build(v, depth + 1) for v in _list(value)]
            return tuple(items) if kind == "tuple" else items
        if kind == "dict":
            pairs = _list(value)
            if not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in pairs):
                raise ProgramError("a malformed scan layout")
            return {k: build(v, depth + 1) for k, v in pairs}
        raise ProgramError("a malformed scan layout")
    return jax.tree_util.tree_structure(build(data, 0), is_leaf=lambda n: isinstance(n, _Leaf))


LINE = "graders_learner_line"  # where a rebuilt equation keeps the learner's line (its xla_metadata)

_DTYPES = frozenset(np.dtype(t).name for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64, np.complex64, np.complex128)) | {"bfloat16"}


def _as_jit(params, n_in, n_out) -> dict:
    """A custom_jvp/custom_vjp call as a jit call of its primal program (run forwards only)."""
    from jax._src.sharding_impls import UNSPECIFIED

    body = params["call_jaxpr"]
    return {"jaxpr": body, "in_shardings": (UNSPECIFIED,) * n_in, "out_shardings": (UNSPECIFIED,) * n_out,
            "in_layouts": (None,) * n_in, "out_layouts": (None,) * n_out, "donated_invars": (False,) * n_in,
            "ctx_mesh": _jit_defaults()[1], "name": "custom_primal",
            "keep_unused": False, "inline": _jit_defaults()[0].AUTO,
            "compiler_options_kvs": ()}


def encode_or_reason(closed, filename: str = "", forward: bool = False) -> dict:
    """encode's result, or {"unreadable": why} for a program that holds what is not sent (the
    judge's check then fails saying so)."""
    try:
        return encode(closed, filename, forward)
    except ProgramError as exc:
        return {"unreadable": str(exc)}


def encode(closed, filename: str = "", forward: bool = False) -> dict:
    """A traced program (jax.make_jaxpr's result) as plain data for graders/kit/wire.py, or a
    ProgramError saying what it holds that is not sent. `filename`: the learner's file, whose
    lines the equations keep; `forward`: custom_jvp/custom_vjp functions as their primal."""
    encoder = _Encoder(filename, forward)
    encoder.jaxpr(closed)
    return {"program": encoder.table}


def encode_with_policies(closed, filename: str = "", forward: bool = False) -> tuple[dict, list]:
    """encode_or_reason's result, and the policies of the learner's own it holds: each such
    policy (a callable that is not one of jax.checkpoint_policies) travels as its number in that
    list, {"custom_policy": n}, never as code. The judge rebuilds it as CustomPolicy(n) (decode
    with custom_policies=True), which it never calls: what such a checkpoint keeps is read from
    the gradient's dataflow (graders/exercises/ex6_nnx_block_remat). Opt-in: encode refuses them.
    A jax.debug.print (PRINTS: no outputs, only a debug effect) is left out here: the program
    computes the same values without it."""
    policies: list = []
    encoder = _Encoder(filename, forward, policies)
    try:
        encoder.jaxpr(closed)
    except ProgramError as exc:
        return {"unreadable": str(exc)}, []
    return {"program": encoder.table}, policies


# ---- decoding (the judge) -------------------------------------------------------------------

_registry: dict = {}


def _primitives() -> dict:
    """name -> primitive object, of every primitive JAX has registered (looked up in the judge's
    own JAX, never named by the message beyond ALLOWED)."""
    if not _registry:
        import sys

        import jax.lax  # noqa: F401
        from jax._src import ad_checkpoint, pjit  # noqa: F401

        for module in list(sys.modules.values()):
            if not getattr(module, "__name__", "").startswith("jax"):
                continue
            for value in list(vars(module).values()):
                if isinstance(value, core.Primitive) and value.name in ALLOWED:
                    _registry.setdefault(value.name, value)
    return _registry


class Program:
    """A decoded program: `closed` (a jax Jaxpr with its constants), ready to evaluate (`run`) and
    to read (graders/kit/jaxpr.py)."""

    def __init__(self, closed):
        self.closed = closed

    @property
    def jaxpr(self):
        return self.closed

    def run(self, *args):
        """The program's outputs on these arrays (jit-compiled)."""
        return jax.jit(core.jaxpr_as_fun(self.closed))(*args)


MAX_CUSTOM_POLICIES = 64


class CustomPolicy:
    """A checkpoint policy of the learner's own, as the judge rebuilds it: only its number in the
    worker's list (encode_with_policies). It is never asked anything; calling it is an error, so
    that no analysis takes it for a policy it does not know."""

    def __init__(self, number: int):
        self.number = number

    def __call__(self, *args, **kwargs):
        raise ProgramError(f"policy #{self.number} is the learner's own: the judge does not run it")

    def __repr__(self):
        return f"CustomPolicy({self.number})"


class _Decoder:
    def __init__(self, custom_policies: bool = False):
        self.count, self.const_bytes = 0, 0
        self.custom = {} if custom_policies else None  # number -> CustomPolicy, one object each
        self.built: list = []  # the table's programs rebuilt so far

    def aval(self, data):
        if not (isinstance(data, list) and len(data) == 3 and isinstance(data[0], list)
                and all(isinstance(n, int) and 0 <= n < 2**31 for n in data[0])
                and data[1] in _DTYPES and isinstance(data[2], bool)):
            raise ProgramError("a malformed abstract value")
        if math.prod(data[0]) > MAX_ELEMENTS:
            raise ProgramError(f"an array of shape {tuple(data[0])}, more than {MAX_ELEMENTS} numbers")
        return core.ShapedArray(tuple(data[0]), np.dtype(data[1]) if data[1] != "bfloat16"
                                else np.dtype(jax.numpy.bfloat16), weak_type=data[2])

    def table(self, table):
        if not isinstance(table, list) or not table:
            raise ProgramError("no program came back")
        for data in table:
            self.built.append(self.jaxpr(data))
        return self.built[-1]

    def jaxpr(self, data, depth=0):
        if not (isinstance(data, dict) and set(data) == {"const", "in", "eqns", "out"}):
            raise ProgramError("a malformed program")
        env: list = []

        def define(aval):
            v = core.Var(self.aval(aval))
            env.append(v)
            return v

        def atom(a):
            if isinstance(a, int) and not isinstance(a, bool):
                if not 0 <= a < len(env):
                    raise ProgramError("a variable used before it is defined")
                return env[a]
            if isinstance(a, dict) and set(a) == {"lit", "aval"}:
                aval = self.aval(a["aval"])
                val = a["lit"]
                if not isinstance(val, np.ndarray) or val.shape != aval.shape or val.ndim:
                    raise ProgramError("a malformed literal")
                return core.Literal(val[()] if val.ndim == 0 else val, aval)
            raise ProgramError("a malformed operand")

        constvars, consts = [], []
        for item in _list(data["const"]):
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], np.ndarray)):
                raise ProgramError("a malformed constant")
            v = define(item[0])
            if item[1].shape != v.aval.shape or item[1].dtype != v.aval.dtype:
                raise ProgramError("a constant whose array does not match its type")
            self.const_bytes += item[1].nbytes
            if self.const_bytes > MAX_CONST_BYTES:
                raise ProgramError(f"more than {MAX_CONST_BYTES >> 20} MiB of constants")
            constvars.append(v)
            consts.append(item[1])
        invars = [define(a) for a in _list(data["in"])]
        eqns = []
        prims = _primitives()
        for item in _list(data["eqns"]):
            self.count += 1
            if self.count > MAX_EQUATIONS:
                raise ProgramError(f"more than {MAX_EQUATIONS} equations")
            if not (isinstance(item, list) and len(item) == 5 and isinstance(item[0], str)
                    and isinstance(item[3], dict) and isinstance(item[4], int)):
                raise ProgramError("a malformed equation")
            name, ins, outs, params, line = item
            if name not in ALLOWED or name not in prims:
                raise ProgramError(f"an equation of an unknown kind ({name[:40]!r})")
            in_atoms = [atom(a) for a in _list(ins)]
            decoded = {str(k): self.param(v, depth) for k, v in params.items()}
            out_vars = []
            for o in _list(outs):
                if not (isinstance(o, list) and len(o) == 2 and isinstance(o[1], bool)):
                    raise ProgramError("a malformed output")
                out_vars.append(core.DropVar(self.aval(o[0])) if o[1] else define(o[0]))
            for value in decoded.values():  # a sharding states the rank of what the equation makes
                if isinstance(value, jax.sharding.NamedSharding) and (
                        not out_vars or len(value.spec) != len(out_vars[0].aval.shape)):
                    raise ProgramError("a sharding of another rank than the value it is for")
            ctx = _context(line)
            eqns.append(core.new_jaxpr_eqn(in_atoms, out_vars, prims[name], decoded, core.no_effects,
                                           source_info_util.new_source_info(), ctx))
        outvars = [atom(a) for a in _list(data["out"])]
        # Named as rebuilt here: without a DebugInfo, JAX 0.12 warns that the jaxpr is deprecated.
        debug = core.DebugInfo("the program the worker sent", "rebuilt by the judge",
                               tuple(f"arg{i}" for i in range(len(invars))),
                               tuple(f"out{i}" for i in range(len(outvars))))
        return core.Jaxpr(constvars, invars, outvars, eqns, debug_info=debug, consts=consts)

    def param(self, value, depth):
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if not (isinstance(value, dict) and len(value) == 1):
            raise ProgramError("a malformed parameter")
        (kind, data), = value.items()
        if kind == "dtype" and isinstance(data, np.dtype):
            return data
        if kind == "np" and isinstance(data, (np.ndarray, np.generic)):
            return data
        if kind == "tuple":
            return tuple(self.param(v, depth) for v in _list(data))
        if kind == "list":
            return [self.param(v, depth) for v in _list(data)]
        if kind == "jaxpr":  # a program earlier in the table
            if not (isinstance(data, int) and not isinstance(data, bool) and 0 <= data < len(self.built)):
                raise ProgramError("a program that refers to one not sent before it")
            return self.built[data]
        if kind == "enum" and isinstance(data, list) and len(data) == 2 and _jit_defaults() and data[0] in _ENUMS:
            try:
                return _ENUMS[data[0]][data[1]]
            except (KeyError, TypeError):
                raise ProgramError("an unknown enum member") from None
        if kind == "nt" and isinstance(data, list) and len(data) == 2 and data[0] in _TUPLES:
            cls = _TUPLES[data[0]]
            fields = [self.param(v, depth) for v in _list(data[1])]
            if len(fields) != len(cls._fields):
                raise ProgramError(f"a malformed {data[0]}")
            return cls(*fields)
        if kind == "ft":
            return self.flat(data, depth)
        if kind == "either" and isinstance(data, list) and len(data) == 2 and isinstance(data[0], bool):
            return flattree.Either(data[0], self.param(data[1], depth))
        if kind == "unspecified":
            from jax._src.sharding_impls import UNSPECIFIED
            return UNSPECIFIED
        if kind == "mesh" and data == "Mesh":
            return _jit_defaults()[1]
        if kind == "mesh" and data == "AbstractMesh":
            return jax.sharding.AbstractMesh((), ())
        if (kind == "sharding" and isinstance(data, list) and len(data) == 2 and data[0] in ("Mesh", "AbstractMesh")
                and isinstance(data[1], int) and not isinstance(data[1], bool) and 0 <= data[1] <= 64):
            mesh = _jit_defaults()[1] if data[0] == "Mesh" else jax.sharding.AbstractMesh((), ())
            return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*[None] * data[1]))
        if kind == "policy" and isinstance(data, str) and data in _policies():
            return _policies()[data]
        if (kind == "custom_policy" and self.custom is not None and isinstance(data, int)
                and not isinstance(data, bool) and 0 <= data < MAX_CUSTOM_POLICIES):
            return self.custom.setdefault(data, CustomPolicy(data))
        raise ProgramError(f"a parameter the grader does not rebuild ({kind[:40]!r})")

    def flat(self, data, depth):
        if isinstance(data, dict) and set(data) == {"tuple"}:
            return flattree.FTTuple(*(self.flat(e, depth) for e in _list(data["tuple"])))
        if isinstance(data, dict) and set(data) == {"one"}:
            return flattree.FTSingleton(self.param(data["one"], depth))
        if isinstance(data, dict) and set(data) == {"filtered"}:
            return flattree.FTFiltered(self.flat(data["filtered"], depth))
        if isinstance(data, dict) and set(data) == {"pytree"} and isinstance(data["pytree"], list) and len(data["pytree"]) == 2:
            xs, skeleton = data["pytree"]
            treedef = _treedef(skeleton)
            xs = tuple(self.param(x, depth) for x in _list(xs))
            if len(xs) != treedef.num_leaves:
                raise ProgramError("a malformed scan layout")
            return flattree.FTPyTree(xs, treedef)
        raise ProgramError("a malformed scan layout")


def _context(line: int):
    """The context a rebuilt equation runs in: the judge's own, with the learner's line kept as
    metadata (under which an equation traced from it keeps it too: graders/kit/jaxpr.py's bind)."""
    base = core.JaxprEqnContext()
    if line <= 0:
        return base
    return core.JaxprEqnContext._create(base.compute_type, base.threefry_partitionable, base.cur_abstract_mesh,
                                        base.cur_layout_mode, base.remove_size_one_mesh_axis, base.no_collectives,
                                        ((LINE, str(line)),))


def _list(value) -> list:
    if not isinstance(value, list):
        raise ProgramError("a malformed program")
    return value


def decode(message, custom_policies: bool = False) -> Program:
    """The program a worker sent (encode's result after the wire), rebuilt and type-checked; a
    ProgramError for anything else. custom_policies: accept the learner's own checkpoint policies
    as numbers (encode_with_policies), rebuilt as CustomPolicy."""
    if isinstance(message, dict) and set(message) == {"unreadable"} and isinstance(message["unreadable"], str):
        raise ProgramError(f"your program holds {message['unreadable'][:300]}")
    if not (isinstance(message, dict) and set(message) == {"program"}):
        raise ProgramError("no program came back")
    try:
        closed = _Decoder(custom_policies).table(message["program"])
        core.check_jaxpr(closed)
    except ProgramError:
        raise
    except RecursionError:
        raise ProgramError("programs nested too deeply") from None
    except Exception as exc:  # a parameter or type that JAX's own rules refuse
        raise ProgramError(f"it does not type-check ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})") from None
    return Program(closed)


def line_of(eqn) -> int:
    """The learner's line a rebuilt equation (or one traced from it) was written at, 0 if none."""
    meta = getattr(eqn.ctx, "xla_metadata", None) or {}
    try:
        return int(meta.get(LINE, 0))
    except (TypeError, ValueError):
        return 0


def primitive_sequence(closed) -> list[str]:
    """The names of a program's equations, nested programs included, in order: the same for two
    traces of one function at different sizes (what a check compares to tie them together)."""
    names = []
    for eqn in closed.eqns:
        names.append(eqn.primitive.name)
        for sub in core.jaxprs_in_params(eqn.params):
            names += primitive_sequence(sub)
    return names
