"""A traced program as plain data: the evidence a judge reads and runs itself (issue 31).

Under --sandbox the learner's code runs in a worker the judge cannot trust: a description the
worker sends ("a scan of length 4 does the work") can be forged by the learner's module. So the
worker sends the learner's *program* instead, its traced jaxpr written out as data (`encode`),
and the judge rebuilds it from its own whitelist of primitives (`decode`), evaluates it on its
own inputs and reads its structure with the analyses of graders/kit/jaxpr.py. A forged program
must then compute the right values (the judge checks them on the program it received) with the
technique (the judge reads it there), which is doing the exercise.

What a program holds, as data:
  * every variable's abstract value (shape, dtype, weak type): plain arrays, and PRNG keys, whose
    dtype travels as its implementation's name (one of KEY_IMPLS, JAX's own);
  * every equation: the primitive's name, its operands (variables or literals), its outputs,
    its parameters (numbers, strings, tuples, dtypes, nested programs recursively, and a few
    JAX objects by kind: enums, dimension numbers, flat-tree layouts, an empty mesh, a checkpoint
    policy by its name in jax.checkpoint_policies or, made by one of its factories, by the
    factory's name and arguments (made_policy), an unsharded NamedSharding on an empty mesh by
    its rank), and the line of the learner's file it was
    written at (for messages: graders.kit.jaxpr.written_at reads it back);
  * the constants as arrays (a key array as its uint32 key data and its implementation's name,
    made again by the judge with jax.random.wrap_key_data).
A custom_jvp or custom_vjp function is sent as a call of its primal program (`forward=True`, for
checks that only run a program forwards), or refused: its derivative rules are Python callables.

Decoding never runs code from the message: names are looked up in the judge's tables, anything
else is refused, sizes are bounded, and the rebuilt program is type-checked (jax's check_jaxpr:
every equation's shapes and parameters through the primitive's own rules, and a PRNG key taken
only by what takes or moves keys, KEY_PRIMITIVES) before anything compiles it. A malformed program is a ProgramError, which a check turns into a failure.
"""

import contextlib
import enum
import functools
import math

import jax
import numpy as np
from jax._src import core, dispatch, source_info_util
from jax._src import flattree
from jax._src.lax import slicing
from jax._src.random import prng

MAX_EQUATIONS = 40_000  # in all, nested programs included: far above any exercise's program
MAX_CONST_BYTES = 64 << 20
MAX_NESTING = 24
# Elements of any one value: the judge runs what it rebuilds, so a program may not make an array
# that would exhaust its memory (the exercises' largest arrays hold a few thousand numbers).
MAX_ELEMENTS = 1 << 24

# Primitives of a program on a mesh of devices (ex3's FSDP by hand): shard_map, the collectives its
# body may call (and their invariant and varying forms), and the sharding annotations of
# explicit mode, and device_put onto a NamedSharding of a mesh (ex7's placements, a value placed
# as ex9's ZeRO-1 state is; a device_put naming a device of the worker's is refused as a parameter
# of another kind). Each reads only its operands and the devices of its own mesh.
MESH_PRIMITIVES = frozenset("""
shard_map all_gather all_gather_invariant psum psum_invariant pmax pmin ppermute axis_index reduce_scatter
all_to_all pvary pbroadcast reshard sharding_constraint device_put
""".split())
MAX_MESH_AXES = 4

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
slice sort split sqrt square squeeze stack stop_gradient sub tan tanh tile top_k transpose while xor
unstack clz conj complex conv_general_dilated reduce_window reduce_window_sum reduce_window_max
reduce_window_min select_and_scatter_add select_and_gather_add polygamma igamma igammac igamma_grad_a
random_gamma_grad bessel_i0e bessel_i1e regularized_incomplete_beta zeta
""".split()) | MESH_PRIMITIVES | frozenset("""
random_seed random_wrap random_unwrap random_split random_fold_in random_bits random_clone random_gamma
""".split())
# (the last line: what a PRNG key brings, jax.random.key/PRNGKey/split/fold_in/bits/uniform/gamma on
# a typed or a raw uint32 key; each a pure function of its operands, run by the judge's own JAX)

# Primitives a PRNG key array may be an operand or a result of: those of the last line above, and
# those that only move values (reshape, slice, gather, select, concatenate, collectives that copy,
# placements, and the calls and loops that pass keys to their bodies, each body read in its turn).
# JAX's shape rules accept a key in others too (argmax, sort, reduce_max, pad, psum, scatter-add),
# which then fail only when compiled; decode refuses them (_takes_keys), so that a program the
# judge accepts is one it can run. Each is compiled on a key array in tests/test_program.py.
KEY_PRIMITIVES = frozenset("""
random_seed random_wrap random_unwrap random_split random_fold_in random_bits random_clone random_gamma
reshape broadcast_in_dim squeeze transpose rev slice dynamic_slice dynamic_update_slice gather scatter
concatenate split tile stack unstack select_n copy optimization_barrier name eq ne
jit remat2 scan while cond shard_map device_put reshard sharding_constraint pvary ppermute
all_to_all all_gather
""".split())


def _takes_keys(name: str, params: dict) -> bool:
    """Whether the primitive `name` with these parameters may have a PRNG key as an operand or result
    (KEY_PRIMITIVES; an all_gather only tiled: JAX cannot compile an untiled one of keys)."""
    return name in KEY_PRIMITIVES and (name != "all_gather" or params.get("tiled") is True)


def _key_misuse(name: str, params: dict, avals) -> str | None:
    """Why an equation of `name` cannot hold these values, when one is a PRNG key and it does not
    take keys (_takes_keys); None otherwise."""
    keyed = next((a for a in avals if is_key(a.dtype)), None)
    if keyed is None or _takes_keys(name, params):
        return None
    return (f"{name[:40]} applied to a PRNG key array ({keyed.str_short()}), where numbers are expected: a key is "
            "only split, folded in, drawn from (jax.random.bits, uniform, bernoulli, ...) or moved (reshaped, "
            "sliced, gathered, selected, concatenated, passed through a jit, loop or shard_map)")

# PRNG implementations a key may be of, by name: the judge rebuilds a key's type, and a key
# constant from its data (jax.random.wrap_key_data), with its own JAX's implementation of that name,
# never with one the message or the learner's process registered.
KEY_IMPLS = ("threefry2x32", "threefry4x32", "philox2x32", "philox4x32", "rbg", "unsafe_rbg")

# What jax.debug.print (and jax.debug.visualize_array_sharding inside a jit) binds: effects and no
# outputs. encode_with_policies, and encode where asked (drop_prints), leaves them out.
PRINTS = frozenset({"debug_print", "debug_callback", "inspect_sharding"})

CUSTOM = frozenset({"custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr"})

# JAX objects a parameter may hold, by kind: the judge rebuilds them from these classes only.
_ENUMS = {cls.__name__: cls for cls in (slicing.GatherScatterMode, jax.lax.Precision, jax.lax.RoundingMethod,
                                        dispatch.ArrayCopySemantics, core.MemorySpace)}
# Memory spaces a value may be in besides the device's: the host's, where an offloading checkpoint
# policy (jax.checkpoint_policies.offload_dot_with_no_batch_dims) keeps its residuals, a device_put
# to MemorySpace.Host putting them there. Sent with the value's type as {"memory": name}.
_MEMORY_SPACES = frozenset({"Host"})
# Enum members a judge does not rebuild: a device_put that donates its input would delete the
# judge's own inputs, which it runs programs on again.
_REFUSED_MEMBERS = frozenset({("ArrayCopySemantics", "DONATE_INPUT")})
# What decode(..., donated_as_copies=True) rebuilds a refused member as: a device_put that donates
# its input computes and places the same values as one that copies it, and the copy leaves the
# judge's inputs alive (the donation only frees memory, which no check reads from it).
_AS_COPIES = {("ArrayCopySemantics", "DONATE_INPUT"): ("ArrayCopySemantics", "ALWAYS_COPY")}
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


# Policies jax.checkpoint_policies' factories make (save_only_these_names("h"), ...): a closure of
# the factory's arguments, sent as the factory's name and those arguments, never as code, and made
# again by the judge calling the same factory. POSITIONAL: factories taking names as *args, with the
# closure variable holding them.
POLICY_FACTORIES = {"save_only_these_names": "names_which_can_be_saved",
                    "save_any_names_but_these": "names_not_to_save",
                    "save_anything_except_these_names": None,
                    "save_and_offload_only_these_names": (), "offload_dot_with_no_batch_dims": (),
                    "save_from_both_policies": ()}
MAX_POLICY_DEPTH = 4


def made_policy(policy, depth: int = 0):
    """[factory name, {argument: value}] of a policy one of POLICY_FACTORIES made (its arguments
    strings, lists of names, or policies, themselves so sent), or None for any other callable."""
    qualname = getattr(policy, "__qualname__", "")
    factory = qualname.split(".<locals>.", 1)[0] if ".<locals>." in qualname else None
    if (depth > MAX_POLICY_DEPTH or factory not in POLICY_FACTORIES
            or not getattr(policy, "__module__", "").startswith("jax._src.ad_checkpoint")):
        return None
    cells = dict(zip(policy.__code__.co_freevars, (c.cell_contents for c in policy.__closure__ or ())))
    args = {}
    for name, value in cells.items():
        if isinstance(value, str):
            args[name] = value
        elif isinstance(value, (set, frozenset, list, tuple)) and all(isinstance(v, str) for v in value):
            args[name] = {"names": sorted(value)}
        elif callable(value):
            known = policy_name(value)
            inner = {"policy": known} if known is not None else made_policy(value, depth + 1)
            if inner is None:
                return None
            args[name] = inner if known is not None else {"made": inner}
        else:
            return None
    return [factory, args]


def rebuilt_policy(data, depth: int = 0):
    """The policy made_policy described, made again by calling its factory; ProgramError for
    anything else."""
    if not (isinstance(data, list) and len(data) == 2 and data[0] in POLICY_FACTORIES and isinstance(data[1], dict)
            and depth <= MAX_POLICY_DEPTH and len(data[1]) <= 8):
        raise ProgramError("a malformed checkpoint policy")
    factory, args = getattr(jax.checkpoint_policies, data[0]), {}
    for name, value in data[1].items():
        if isinstance(value, str) and len(value) <= 200:
            args[name] = value
        elif isinstance(value, dict) and set(value) == {"names"} and isinstance(value["names"], list) and all(
                isinstance(v, str) and len(v) <= 200 for v in value["names"]) and len(value["names"]) <= 256:
            args[name] = set(value["names"])
        elif isinstance(value, dict) and set(value) == {"policy"} and value["policy"] in _policies():
            args[name] = _policies()[value["policy"]]
        elif isinstance(value, dict) and set(value) == {"made"}:
            args[name] = rebuilt_policy(value["made"], depth + 1)
        else:
            raise ProgramError("a malformed checkpoint policy")
    positional = POLICY_FACTORIES[data[0]]
    try:
        if positional is None:
            return factory()
        if isinstance(positional, str):
            if set(args) != {positional}:
                raise ProgramError("a malformed checkpoint policy")
            return factory(*sorted(args[positional]))
        if data[0] == "save_from_both_policies":
            return factory(args["policy_1"], args["policy_2"])
        return factory(**args)
    except ProgramError:
        raise
    except Exception as exc:  # noqa: BLE001 (arguments the factory refuses)
        raise ProgramError(f"a checkpoint policy the grader cannot make again ({type(exc).__name__})") from None


def said_name(obj) -> str:
    return getattr(obj, "__qualname__", None) or type(obj).__name__


# ---- encoding (the worker) ------------------------------------------------------------------

class _Encoder:
    def __init__(self, filename: str, forward: bool, policies: list | None = None, meshes: bool = False,
                 drop_prints: bool = False):
        self.filename, self.forward = str(filename or ""), forward
        self.allow_meshes = meshes  # programs on a mesh of devices are sent (ex3); refused otherwise
        self.policies = policies  # encode_with_policies: the learner's own policies, by number
        self.drop_prints = drop_prints  # ... and jax.debug.print left out (PRINTS)
        self.count = 0
        self.table: list = []  # every program, each after the programs it holds (no nesting on the wire)
        self.done: dict = {}  # id(jaxpr) -> its index in table
        self.types: dict = {}  # (sharding, manual axis type) -> its index in typed
        self.typed: list = []  # the sharded types of the program's values, each sent once

    def mesh_data(self, mesh) -> list:
        # A program spread over devices is read only where the exercise is about that (ex3): the
        # others measure what one device holds, which a sharding would make smaller.
        if not self.allow_meshes:
            raise ProgramError("a program sharded over a mesh of devices, which this check does not read")
        return _mesh_data(mesh)

    def aval(self, aval):
        if type(aval) is not core.ShapedArray:
            raise ProgramError(f"a value of kind {type(aval).__name__} ({aval}): only plain arrays are read")
        dtype = _dtype_name(aval.dtype)
        if dtype not in _DTYPES and dtype not in _key_dtypes():
            raise ProgramError(f"a value of dtype {aval.dtype}: only numeric arrays and PRNG keys of "
                               f"{', '.join(KEY_IMPLS)} are read")
        plain = [list(int(n) for n in aval.shape), dtype, bool(aval.weak_type)]
        memory = aval.memory_space
        if (memory is not core.MemorySpace.Device and getattr(memory, "name", None) not in _MEMORY_SPACES
                or aval.layout is not core.AutoLayout):
            raise ProgramError(f"a value in memory {aval.memory_space} or of a layout of its own: only device "
                               "and host arrays are read")
        sharding, mat = aval.sharding, aval.manual_axis_type
        unsharded = sharding.mesh.empty and mat.empty and _unsharded(sharding.spec)
        if memory is not core.MemorySpace.Device and unsharded:
            return plain + [{"memory": memory.name}]  # e.g. a residual an offloading policy keeps on the host
        if unsharded:
            return plain  # a value outside any mesh: what every program off a mesh holds
        if mat.unreduced_kind not in (None, core.UnreducedKind.sum):
            raise ProgramError(f"a value unreduced by {mat.unreduced_kind}")
        # a sharded type is sent once per program message, and each value refers to it by index
        key = (sharding, mat)
        if key not in self.types:
            self.types[key] = len(self.types)
            self.typed.append({"mesh": self.mesh_data(sharding.mesh), "spec": _spec_data(sharding.spec),
                               "mat": [sorted(map(str, mat.varying)), sorted(map(str, mat.unreduced)),
                                       sorted(map(str, mat.reduced))]})
        if memory is not core.MemorySpace.Device:  # an offloading policy's residual on a mesh: its sharded type, on the host
            return plain + [self.types[key], {"memory": memory.name}]
        return plain + [self.types[key]]

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
                if is_key(v.aval.dtype):
                    raise ProgramError("a PRNG key written as a literal")
                return {"lit": np.asarray(v.val, dtype=v.aval.dtype), "aval": self.aval(v.aval)}
            if v not in names:
                raise ProgramError("a variable used before it is defined")
            return names[v]

        consts = list(getattr(jaxpr, "consts", ()) or ())
        out = {"const": [], "in": [], "eqns": [], "out": None}
        for v, c in zip(jaxpr.constvars, consts):
            aval = define(v)
            out["const"].append([aval, _key_constant(c) if is_key(v.aval.dtype) else np.asarray(c)])
        for v in jaxpr.constvars[len(consts):]:
            raise ProgramError("a program whose constants are not given")
        out["in"] = [define(v) for v in jaxpr.invars]
        for eqn in jaxpr.eqns:
            self.count += 1
            if self.count > MAX_EQUATIONS:
                raise ProgramError(f"more than {MAX_EQUATIONS} equations")
            if self.drop_prints and eqn.primitive.name in PRINTS and not eqn.outvars:
                continue  # a print returns nothing: the program computes the same without it
            # a collective's named axes are its own business (the shard_map it runs in binds them);
            # with drop_prints, a print's DebugEffect on a call that holds one is left out too
            other = [e for e in eqn.effects if not isinstance(e, core.NamedAxisEffect)
                     and not (self.drop_prints and type(e).__name__ == "DebugEffect")]
            if other:
                raise ProgramError(f"{eqn.primitive.name} has effects ({', '.join(map(str, other))})")
            name, params = eqn.primitive.name, eqn.params
            if name in CUSTOM:
                if not self.forward:
                    raise ProgramError(f"a {name.split('_call')[0]} function: its derivative rule is Python "
                                       "code, which is not sent")
                name, params = "jit", _as_jit(params, len(eqn.invars), len(eqn.outvars), name)
            elif name not in ALLOWED:
                raise ProgramError(f"the primitive {name!r}, which no exercise's program needs")
            ins = [atom(v) for v in eqn.invars]
            encoded = {k: self.param(v, depth) for k, v in sorted(params.items())}
            outs = [[self.aval(v.aval), isinstance(v, core.DropVar)] for v in eqn.outvars]
            for v in eqn.outvars:
                if not isinstance(v, core.DropVar):
                    names[v] = len(names)
            # on a mesh: the mesh axes a collective runs over (JAX's NamedAxisEffect), and the
            # mesh the equation was traced under (in a shard_map's body, its axes made manual)
            on = {}
            axes = sorted(str(e.name) for e in eqn.effects if isinstance(e, core.NamedAxisEffect))
            if axes:
                on["axes"] = axes
            ctx_mesh = getattr(eqn.ctx, "cur_abstract_mesh", None)
            if ctx_mesh is not None and not ctx_mesh.empty:
                on["mesh"] = self.mesh_data(ctx_mesh)
            out["eqns"].append([name, ins, outs, encoded, self.line(eqn)] + ([on] if on else []))
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
            traceback = eqn.source_info.traceback
            code, lasti = traceback.raw_frames() if traceback else ([], [])
        except Exception:  # no traceback kept
            return 0
        # The innermost frame of the learner's file, as source_info_util.user_frames would list it;
        # only that frame is turned into a line (every frame's location is most of encode's time).
        for c, i in zip(code, lasti):
            if c.co_filename == self.filename and source_info_util.is_user_filename(c.co_filename):
                return int(source_info_util.raw_frame_to_frame(c, i).start_line)
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
        if isinstance(value, prng.PRNGImpl):  # random_seed's, random_wrap's: by name, never its functions
            if _key_impls().get(value.name) is not value:
                raise ProgramError(f"a PRNG implementation {value.name!r}: only JAX's own ({', '.join(KEY_IMPLS)}) "
                                   "are read")
            return {"prng_impl": value.name}
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
            mesh, spec = value.mesh, value.spec
            if not isinstance(mesh, (jax.sharding.Mesh, jax.sharding.AbstractMesh)) or value.memory_kind not in (
                    None, "device"):
                raise ProgramError("a sharding in memory of its own kind, which no exercise's program needs")
            if not mesh.axis_names and _unsharded(spec):
                # a value's sharding as a backward pass states it (convert_element_type's
                # transpose): on an empty mesh, every axis unsharded, it says nothing but the rank
                return {"sharding": [type(mesh).__name__, len(spec)]}
            # on a mesh of devices: the mesh by its axes (never its devices), the spec by axis names
            return {"named": [self.mesh_data(mesh), _spec_data(spec), value.memory_kind]}
        if isinstance(value, jax.sharding.PartitionSpec):
            return {"spec": _spec_data(value)}
        if isinstance(value, (jax.sharding.Mesh, jax.sharding.AbstractMesh)):
            if not value.axis_names:
                return {"mesh": type(value).__name__}
            return {"mesh": self.mesh_data(value)}
        if isinstance(value, frozenset):
            if not (all(isinstance(v, str) for v in value) or all(type(v) is int for v in value)):
                raise ProgramError("a set of other things than axis names or dimensions")
            return {"frozenset": sorted(value)}
        if callable(value):
            name = policy_name(value)
            if name is None and self.policies is not None:
                for number, known in enumerate(self.policies):
                    if known is value:
                        return {"custom_policy": number}
                self.policies.append(value)
                return {"custom_policy": len(self.policies) - 1}
            if name is None and made_policy(value) is not None:
                return {"made_policy": made_policy(value)}
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
        if isinstance(tree, flattree.FTDict):
            return {"dict": [[str(k) for k in tree.keys], [self.flat(v, depth) for v in tree._vals]]}
        if isinstance(tree, flattree.FTPyTree):
            # a loop's carry of tuples, lists and dicts (fori_loop's under grad): its layout as a
            # skeleton of those alone, and its leaves
            skeleton = tree.tree.unflatten([0] * tree.tree.num_leaves)
            return {"pytree": [_skeleton(skeleton), [self.param(v, depth) for v in tree.xs]]}
        raise ProgramError(f"a scan layout of kind {type(tree).__name__}")


def _skeleton(obj):
    """A pytree layout of tuples, lists, dicts with string keys and None, as data ("*" a leaf)."""
    if obj is None:
        return None
    if type(obj) is int and obj == 0:
        return "*"
    if type(obj) is tuple:
        return {"t": [_skeleton(v) for v in obj]}
    if type(obj) is list:
        return {"l": [_skeleton(v) for v in obj]}
    if type(obj) is dict and all(isinstance(k, str) for k in obj):
        return {"d": [[k, _skeleton(v)] for k, v in obj.items()]}
    raise ProgramError(f"a loop carry holding a {type(obj).__name__}: only tuples, lists and dicts are read")


def _from_skeleton(data, depth=0):
    if depth > MAX_NESTING * 4:
        raise ProgramError("a loop carry nested too deeply")
    if data is None:
        return None
    if data == "*":
        return 0
    if isinstance(data, dict) and len(data) == 1:
        (kind, items), = data.items()
        if kind == "t" and isinstance(items, list):
            return tuple(_from_skeleton(v, depth + 1) for v in items)
        if kind == "l" and isinstance(items, list):
            return [_from_skeleton(v, depth + 1) for v in items]
        if kind == "d" and isinstance(items, list) and all(
                isinstance(i, list) and len(i) == 2 and isinstance(i[0], str) for i in items):
            return {k: _from_skeleton(v, depth + 1) for k, v in items}
    raise ProgramError("a malformed loop carry")


def _unsharded(spec) -> bool:
    return all(p is None for p in spec.partitions) and not spec.unreduced and not spec.reduced


def _mesh_data(mesh) -> list:
    """A mesh as it travels: its kind, axis sizes, names and types; never its devices (the judge
    lays the mesh out on its own)."""
    if not isinstance(mesh, (jax.sharding.Mesh, jax.sharding.AbstractMesh)):
        raise ProgramError(f"a mesh of kind {type(mesh).__name__}")
    names = list(mesh.axis_names)
    if not all(isinstance(n, str) for n in names):
        raise ProgramError("a mesh whose axes are not named by strings")
    return [type(mesh).__name__, [int(n) for n in mesh.axis_sizes], names, [t.name for t in mesh.axis_types]]


def _spec_data(spec) -> list:
    """A PartitionSpec by axis names: [parts, unreduced, reduced]; a part is None, an axis name, a
    list of names, or {"unconstrained": 0}."""
    parts = []
    for part in spec.partitions:
        if part is None or isinstance(part, str):
            parts.append(part)
        elif part is jax.sharding.PartitionSpec.UNCONSTRAINED:
            parts.append({"unconstrained": 0})
        elif isinstance(part, tuple) and all(isinstance(a, str) for a in part):
            parts.append(list(part))
        else:
            raise ProgramError(f"a partition spec part {part!r}")
    if getattr(spec, "unreduced_kind", None) not in (None, core.UnreducedKind.sum):
        raise ProgramError(f"a partition spec unreduced by {spec.unreduced_kind}")
    return [parts, sorted(map(str, spec.unreduced)), sorted(map(str, spec.reduced))]


LINE = "graders_learner_line"  # where a rebuilt equation keeps the learner's line (its xla_metadata)

_DTYPES = frozenset(np.dtype(t).name for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64, np.complex64, np.complex128)) | {"bfloat16"}


@functools.cache
def _dtype_name(dtype) -> str:
    if isinstance(dtype, prng.KeyTy):  # a PRNG key: by its implementation's name (KEY_IMPLS)
        impl = dtype._impl
        return f"key<{impl.name}>" if _key_impls().get(impl.name) is impl else f"key of {impl.name!r}"
    return dtype.name  # NumPy builds the name anew on each read; encode reads one per value


@functools.cache
def _key_impls() -> dict:
    """name -> the PRNG implementation of that name in this process's JAX, for KEY_IMPLS: a fixed
    list of JAX's own, so that an implementation registered under another name (Python functions of
    the learner's) is refused; a key's type and constants name one of these, never a function."""
    return {name: prng.prngs[name] for name in KEY_IMPLS if name in prng.prngs}


@functools.cache
def _key_dtypes() -> dict:
    """What a key's type travels as ("key<threefry2x32>") -> its dtype, rebuilt by the judge."""
    return {f"key<{name}>": prng.KeyTy(impl) for name, impl in _key_impls().items()}


def is_key(dtype) -> bool:
    return isinstance(dtype, prng.KeyTy)


def zeros_of(aval):
    """Zeros of a value's type (shape and dtype): for a PRNG key, the key whose data are zeros."""
    if is_key(aval.dtype):
        impl = aval.dtype._impl
        return jax.random.wrap_key_data(np.zeros((*aval.shape, *impl.key_shape), np.uint32), impl=impl.name)
    return np.zeros(aval.shape, aval.dtype)


def as_numbers(value):
    """An array as NumPy numbers: a PRNG key array as its key data (uint32)."""
    if is_key(getattr(value, "dtype", None)):
        return np.asarray(jax.random.key_data(value))
    return np.asarray(value)


def _key_constant(value) -> dict:
    """A key array of the program's constants as it travels: its implementation's name and its data."""
    impl = value.dtype._impl
    if _key_impls().get(impl.name) is not impl:
        raise ProgramError(f"a PRNG key of the implementation {impl.name!r}: only JAX's own ({', '.join(KEY_IMPLS)}) "
                           "are read")
    return {"key": [impl.name, np.asarray(jax.random.key_data(value))]}


def _key_sent(data, aval):
    """(implementation name, uint32 data) of a key constant as it travels, {"key": [name, data]}, for a
    value of type aval; ProgramError for anything else."""
    if not (isinstance(data, dict) and set(data) == {"key"} and isinstance(data["key"], list)
            and len(data["key"]) == 2 and isinstance(data["key"][0], str) and isinstance(data["key"][1], np.ndarray)):
        raise ProgramError("a malformed constant")
    name, array = data["key"]
    impl = _key_impls().get(name)
    if impl is None:
        raise ProgramError(f"a PRNG key of an unknown implementation ({name[:40]!r}): only {', '.join(KEY_IMPLS)} "
                           "are read")
    if not is_key(aval.dtype) or aval.dtype._impl is not impl:
        raise ProgramError(f"a PRNG key constant of {name} for a value of type {aval.str_short()}")
    if array.dtype != np.uint32 or array.shape != (*aval.shape, *impl.key_shape):
        raise ProgramError(f"a PRNG key constant of {name} whose data are {array.dtype}{list(array.shape)}, where "
                           f"its type's are uint32{list((*aval.shape, *impl.key_shape))}")
    return name, array


def _key_of(array, name):
    """The key array of this implementation with these data (checked by _key_sent)."""
    try:
        return jax.random.wrap_key_data(array, impl=name)
    except Exception as exc:  # noqa: BLE001 (JAX's own refusal)
        raise ProgramError(f"a PRNG key JAX refuses ({' '.join(str(exc).split())[:160]})") from None


def _as_jit(params, n_in, n_out, kind="custom_primal") -> dict:
    """A custom_jvp/custom_vjp call as a jit call of its primal program (run forwards only), named
    after the kind of call it was (custom_jvp_call, custom_vjp_call: what a message can say)."""
    from jax._src.sharding_impls import UNSPECIFIED

    body = params["call_jaxpr"]
    return {"jaxpr": body, "in_shardings": (UNSPECIFIED,) * n_in, "out_shardings": (UNSPECIFIED,) * n_out,
            "in_layouts": (None,) * n_in, "out_layouts": (None,) * n_out, "donated_invars": (False,) * n_in,
            "ctx_mesh": _jit_defaults()[1], "name": kind,
            "keep_unused": False, "inline": _jit_defaults()[0].AUTO,
            "compiler_options_kvs": ()}


def as_one_call(closed, ctx_mesh):
    """A rebuilt program as a function that stages it as one jit call under `ctx_mesh` (ex3, ex7,
    ex9): lowered as it is, not traced again equation by equation as jaxpr_as_fun would."""
    from jax._src.pjit import jit_p

    params = _as_jit({"call_jaxpr": closed}, len(closed.invars), len(closed.outvars), "rebuilt")
    params["ctx_mesh"] = ctx_mesh
    return lambda *args: jit_p.bind(*args, **params)


def encode_or_reason(closed, filename: str = "", forward: bool = False, meshes: bool = False,
                     drop_prints: bool = False, custom_policies: bool = False) -> dict:
    """encode's result, or {"unreadable": why} for a program that holds what is not sent (the
    judge's check then fails saying so)."""
    try:
        return encode(closed, filename, forward, meshes, drop_prints, custom_policies)
    except ProgramError as exc:
        return {"unreadable": str(exc)}


def encode(closed, filename: str = "", forward: bool = False, meshes: bool = False, drop_prints: bool = False,
           custom_policies: bool = False) -> dict:
    """A traced program (jax.make_jaxpr's result) as plain data for graders/kit/wire.py, or a
    ProgramError saying what it holds that is not sent. `filename`: the learner's file, whose
    lines the equations keep; `forward`: custom_jvp/custom_vjp functions as their primal;
    `meshes`: a program on a mesh of devices is sent (refused unless asked for); `drop_prints`:
    a jax.debug.print or visualize_array_sharding (PRINTS: no outputs) is left out, as the program
    computes the same without it (refused unless asked for); `custom_policies`: a checkpoint
    policy of the learner's own travels as its number, {"custom_policy": n}, as in
    encode_with_policies (refused unless asked for), for a judge that only lowers and runs the
    program (lowering a checkpoint never calls its policy) and decodes with custom_policies=True."""
    encoder = _Encoder(filename, forward, [] if custom_policies else None, meshes=meshes, drop_prints=drop_prints)
    encoder.jaxpr(closed)
    if encoder.typed:  # a program on a mesh: the sharded types its values refer to
        return {"program": encoder.table, "types": encoder.typed}
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
    encoder = _Encoder(filename, forward, policies, drop_prints=True)
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
        from jax._src import ad_checkpoint, pjit, shard_map  # noqa: F401
        from jax._src.lax import convolution, parallel, special, windowed_reductions  # noqa: F401

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
    def __init__(self, custom_policies: bool = False, devices=None, meshes: bool = False,
                 donated_as_copies: bool = False):
        self.donated_as_copies = donated_as_copies
        self.allow_meshes = meshes  # a mesh in the message is rebuilt only when asked for (encode's meshes)
        self.count, self.const_bytes = 0, 0
        self.custom = {} if custom_policies else None  # number -> CustomPolicy, one object each
        self.built: list = []  # the table's programs rebuilt so far
        self.devices = list(devices) if devices is not None else None
        self.meshes: dict = {}
        self.typed: list = []  # the message's sharded types, as sent
        self.typed_built: dict = {}  # index -> (abstract mesh, spec, varying, unreduced, reduced)

    def aval(self, data):
        if not (isinstance(data, list) and len(data) in (3, 4, 5) and isinstance(data[0], list)
                and all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**31 for n in data[0])
                and isinstance(data[1], str) and (data[1] in _DTYPES or data[1] in _key_dtypes())
                and isinstance(data[2], bool)):
            raise ProgramError("a malformed abstract value")
        if math.prod(data[0]) > MAX_ELEMENTS:
            raise ProgramError(f"an array of shape {tuple(data[0])}, more than {MAX_ELEMENTS} numbers")
        shape = tuple(data[0])
        dtype = (_key_dtypes()[data[1]] if data[1] in _key_dtypes()
                 else np.dtype(data[1]) if data[1] != "bfloat16" else np.dtype(jax.numpy.bfloat16))
        if len(data) == 3:
            return core.ShapedArray(shape, dtype, weak_type=data[2])
        if isinstance(data[3], dict):
            if len(data) != 4 or set(data[3]) != {"memory"} or data[3]["memory"] not in _MEMORY_SPACES:
                raise ProgramError("a value in a memory the grader does not read")
            return core.ShapedArray(shape, dtype, weak_type=data[2], memory_space=core.MemorySpace[data[3]["memory"]])
        memory = {}
        if len(data) == 5:  # a sharded value in another memory than the device's (the host's)
            if not (isinstance(data[4], dict) and set(data[4]) == {"memory"} and data[4]["memory"] in _MEMORY_SPACES):
                raise ProgramError("a value in a memory the grader does not read")
            memory = {"memory_space": core.MemorySpace[data[4]["memory"]]}
        index = data[3]
        if not (isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(self.typed)):
            raise ProgramError("a value of a sharded type not sent")
        if index not in self.typed_built:
            typed = self.typed[index]
            if not (isinstance(typed, dict) and set(typed) == {"mesh", "spec", "mat"}
                    and isinstance(typed["mat"], list) and len(typed["mat"]) == 3
                    and isinstance(typed["mesh"], list) and typed["mesh"]):
                raise ProgramError("a malformed sharded type")
            mesh = self.mesh(typed["mesh"])
            mesh = mesh.abstract_mesh if isinstance(mesh, jax.sharding.Mesh) else mesh
            spec = self.spec(typed["spec"], mesh)
            self.typed_built[index] = (mesh, spec, *(self.names(v, mesh) for v in typed["mat"]))
        mesh, spec, varying, unreduced, reduced = self.typed_built[index]
        if len(spec.partitions) > len(shape):
            raise ProgramError(f"a partition spec of {len(spec.partitions)} parts for a value of rank {len(shape)}")
        try:
            return core.ShapedArray(shape, dtype, weak_type=data[2],
                                    sharding=jax.sharding.NamedSharding(mesh, spec),
                                    manual_axis_type=core.ManualAxisType(varying=varying, unreduced=unreduced,
                                                                         reduced=reduced), **memory)
        except Exception as exc:  # JAX's own rules: a spec or varying axes the mesh's types refuse
            raise ProgramError(f"a sharded value JAX refuses ({' '.join(str(exc).split())[:160]})") from None

    # ---- meshes and specs: by axis names, laid out on the judge's own devices ----

    def mesh(self, data):
        """A mesh of the judge's devices with these axis sizes, names and types (a Mesh), or its
        abstract form (an AbstractMesh); the same data gives the same object."""
        if not self.allow_meshes:  # what a worker sends is not trusted to have been encoded as asked
            raise ProgramError("a program sharded over a mesh of devices, which this check does not read")
        if not (isinstance(data, list) and len(data) == 4 and data[0] in ("Mesh", "AbstractMesh")
                and all(isinstance(v, list) for v in data[1:]) and 0 < len(data[1]) <= MAX_MESH_AXES
                and len(data[1]) == len(data[2]) == len(data[3])):
            raise ProgramError("a malformed mesh")
        kind, sizes, names, types = data
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in sizes):
            raise ProgramError("a mesh whose axis sizes are not positive whole numbers")
        if not (all(isinstance(n, str) and 0 < len(n) <= 64 for n in names) and len(set(names)) == len(names)):
            raise ProgramError("a mesh whose axis names are not distinct names")
        if not all(isinstance(t, str) and t in jax.sharding.AxisType.__members__ for t in types):
            raise ProgramError("a mesh with an unknown axis type")
        devices = self.devices if self.devices is not None else jax.devices()
        if math.prod(sizes) > len(devices):
            raise ProgramError(f"a mesh of {math.prod(sizes)} devices; the grader has {len(devices)}")
        key = (tuple(sizes), tuple(names), tuple(types))
        if key not in self.meshes:
            try:
                self.meshes[key] = jax.sharding.Mesh(
                    np.array(devices[:math.prod(sizes)], dtype=object).reshape(sizes), tuple(names),
                    axis_types=tuple(jax.sharding.AxisType[t] for t in types))
            except Exception as exc:
                raise ProgramError(f"a mesh JAX refuses ({' '.join(str(exc).split())[:160]})") from None
        return self.meshes[key] if kind == "Mesh" else self.meshes[key].abstract_mesh

    def names(self, data, mesh=None) -> frozenset:
        if not (isinstance(data, list) and all(isinstance(n, str) for n in data)):
            raise ProgramError("malformed axis names")
        if mesh is not None and not set(data) <= set(mesh.axis_names):
            raise ProgramError(f"an axis name not of its mesh ({sorted(set(data) - set(mesh.axis_names))[:3]})")
        return frozenset(data)

    def spec(self, data, mesh=None, rank=None):
        """A PartitionSpec from axis names; with a mesh, every name one of its axes, none twice,
        and no more parts than the value's rank."""
        if not (isinstance(data, list) and len(data) == 3 and isinstance(data[0], list) and len(data[0]) <= 64):
            raise ProgramError("a malformed partition spec")
        parts, used = [], []
        for part in data[0]:
            if part is None:
                parts.append(None)
            elif isinstance(part, str):
                parts.append(part)
                used.append(part)
            elif isinstance(part, list) and part and all(isinstance(a, str) for a in part):
                parts.append(tuple(part))
                used += part
            elif part == {"unconstrained": 0}:
                parts.append(jax.sharding.PartitionSpec.UNCONSTRAINED)
            else:
                raise ProgramError("a malformed partition spec part")
        unreduced, reduced = self.names(data[1], mesh), self.names(data[2], mesh)
        if mesh is not None:
            self.names(used, mesh)
        if len(set(used)) != len(used) or set(used) & (unreduced | reduced):
            raise ProgramError("a partition spec that names an axis twice")
        if rank is not None and len(parts) > rank:
            raise ProgramError(f"a partition spec of {len(parts)} parts for a value of rank {rank}")
        try:
            return jax.sharding.PartitionSpec(*parts, unreduced=unreduced, reduced=reduced)
        except Exception as exc:
            raise ProgramError(f"a partition spec JAX refuses ({' '.join(str(exc).split())[:160]})") from None

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
                if is_key(aval.dtype):
                    raise ProgramError("a PRNG key written as a literal")
                val = a["lit"]
                if not isinstance(val, np.ndarray) or val.shape != aval.shape or val.ndim:
                    raise ProgramError("a malformed literal")
                return core.Literal(val[()] if val.ndim == 0 else val, aval)
            raise ProgramError("a malformed operand")

        constvars, consts = [], []
        for item in _list(data["const"]):
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], (np.ndarray, dict))):
                raise ProgramError("a malformed constant")
            v = define(item[0])
            if is_key(v.aval.dtype) or isinstance(item[1], dict):  # a PRNG key: its implementation and data
                name, array = _key_sent(item[1], v.aval)
            else:
                name, array = None, item[1]
                if array.shape != v.aval.shape or array.dtype != v.aval.dtype:
                    raise ProgramError("a constant whose array does not match its type")
            self.const_bytes += array.nbytes
            if self.const_bytes > MAX_CONST_BYTES:
                raise ProgramError(f"more than {MAX_CONST_BYTES >> 20} MiB of constants")
            constvars.append(v)
            consts.append(array if name is None else _key_of(array, name))
        invars = [define(a) for a in _list(data["in"])]
        eqns = []
        prims = _primitives()
        for item in _list(data["eqns"]):
            self.count += 1
            if self.count > MAX_EQUATIONS:
                raise ProgramError(f"more than {MAX_EQUATIONS} equations")
            if not (isinstance(item, list) and len(item) in (5, 6) and isinstance(item[0], str)
                    and isinstance(item[3], dict) and isinstance(item[4], int)):
                raise ProgramError("a malformed equation")
            name, ins, outs, params, line = item[:5]
            on = item[5] if len(item) == 6 else {}
            if not (isinstance(on, dict) and set(on) <= {"axes", "mesh"}):
                raise ProgramError("a malformed equation")
            # the mesh axes a collective runs over (JAX's NamedAxisEffect): none but a collective's
            effects = {core.NamedAxisEffect(a) for a in self.names(on["axes"])} if "axes" in on else core.no_effects
            if effects and name not in MESH_PRIMITIVES - {"shard_map"} and not _holds_program(params):
                raise ProgramError(f"an equation ({name[:40]}) that names mesh axes")
            ctx_mesh = None
            if "mesh" in on:
                ctx_mesh = self.mesh(on["mesh"])
                ctx_mesh = ctx_mesh.abstract_mesh if isinstance(ctx_mesh, jax.sharding.Mesh) else ctx_mesh
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
                        not out_vars or len(value.spec) > len(out_vars[0].aval.shape)
                        or not value.mesh.axis_names and len(value.spec) != len(out_vars[0].aval.shape)):
                    raise ProgramError("a sharding of another rank than the value it is for")
            misuse = _key_misuse(name, decoded, [a.aval for a in (*in_atoms, *out_vars)])
            if misuse is not None:
                raise ProgramError(misuse)
            if name == "shard_map":
                _check_shard_map(decoded, in_atoms, out_vars)
            ctx = _context(line, ctx_mesh)
            eqns.append(core.new_jaxpr_eqn(in_atoms, out_vars, prims[name], decoded, effects,
                                           source_info_util.new_source_info(), ctx))
        outvars = [atom(a) for a in _list(data["out"])]
        # Named as rebuilt here: without a DebugInfo, JAX 0.12 warns that the jaxpr is deprecated.
        debug = core.DebugInfo("the program the worker sent", "rebuilt by the judge",
                               tuple(f"arg{i}" for i in range(len(invars))),
                               tuple(f"out{i}" for i in range(len(outvars))))
        return core.Jaxpr(constvars, invars, outvars, eqns, effects=core.join_effects(*(e.effects for e in eqns)),
                          debug_info=debug, consts=consts)

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
            if self.donated_as_copies and tuple(data) in _AS_COPIES:
                data = list(_AS_COPIES[tuple(data)])
            if tuple(data) in _REFUSED_MEMBERS:
                raise ProgramError(f"a {data[0]}.{data[1]}, which the grader does not run")
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
        if kind == "mesh" and isinstance(data, list):
            return self.mesh(data)
        if kind == "spec":
            return self.spec(data)
        if kind == "named" and isinstance(data, list) and len(data) == 3 and data[2] in (None, "device"):
            mesh = self.mesh(data[0])
            spec = self.spec(data[1], mesh)
            try:
                return jax.sharding.NamedSharding(mesh, spec, memory_kind=data[2])
            except Exception as exc:
                raise ProgramError(f"a sharding JAX refuses ({' '.join(str(exc).split())[:160]})") from None
        if kind == "frozenset" and isinstance(data, list) and all(type(v) is int and 0 <= v < 64 for v in data):
            return frozenset(data)
        if kind == "frozenset":
            return self.names(data)
        if kind == "mesh" and data == "Mesh":
            return _jit_defaults()[1]
        if kind == "mesh" and data == "AbstractMesh":
            return jax.sharding.AbstractMesh((), ())
        if (kind == "sharding" and isinstance(data, list) and len(data) == 2 and data[0] in ("Mesh", "AbstractMesh")
                and isinstance(data[1], int) and not isinstance(data[1], bool) and 0 <= data[1] <= 64):
            mesh = _jit_defaults()[1] if data[0] == "Mesh" else jax.sharding.AbstractMesh((), ())
            return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*[None] * data[1]))
        if kind == "prng_impl" and isinstance(data, str) and data in _key_impls():
            return _key_impls()[data]
        if kind == "policy" and isinstance(data, str) and data in _policies():
            return _policies()[data]
        if kind == "made_policy":
            return rebuilt_policy(data)
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
        if (isinstance(data, dict) and set(data) == {"dict"} and isinstance(data["dict"], list) and len(data["dict"]) == 2
                and all(isinstance(k, str) for k in _list(data["dict"][0])) and len(data["dict"][0]) == len(_list(data["dict"][1]))):
            return flattree.FTDict(tuple(data["dict"][0]), tuple(self.flat(v, depth) for v in data["dict"][1]))
        if isinstance(data, dict) and set(data) == {"pytree"} and isinstance(data["pytree"], list) and len(data["pytree"]) == 2:
            treedef = flattree.tracing_registry.flatten(_from_skeleton(data["pytree"][0]))[1]
            xs = [self.param(v, depth) for v in _list(data["pytree"][1])]
            if treedef.num_leaves != len(xs):
                raise ProgramError("a loop carry whose layout and leaves disagree")
            return flattree.FTPyTree(tuple(xs), treedef)
        raise ProgramError("a malformed scan layout")


def _holds_program(data) -> bool:
    """Whether encoded parameters hold a nested program (a call, loop or branch, which carries the
    named axes its body's collectives run over)."""
    if isinstance(data, dict):
        return "jaxpr" in data or any(_holds_program(v) for v in data.values())
    if isinstance(data, list):
        return any(_holds_program(v) for v in data)
    return False


def _check_shard_map(params: dict, ins: list, outs: list) -> None:
    """What JAX's check_jaxpr does not check of a shard_map: that its specs name its own mesh's
    axes and split each value into the blocks its body takes and gives."""
    mesh, body = params.get("mesh"), params.get("jaxpr")
    in_specs, out_specs = params.get("in_specs"), params.get("out_specs")
    if not (isinstance(mesh, (jax.sharding.Mesh, jax.sharding.AbstractMesh)) and mesh.axis_names
            and isinstance(body, core.Jaxpr) and isinstance(in_specs, tuple) and isinstance(out_specs, tuple)
            and all(isinstance(s, jax.sharding.PartitionSpec) for s in in_specs + out_specs)
            and isinstance(params.get("check_vma"), bool)
            and isinstance(params.get("newly_manual_axes"), frozenset)):
        raise ProgramError("a malformed shard_map")
    if not params["newly_manual_axes"] <= set(mesh.axis_names):
        raise ProgramError("a shard_map made manual over axes not of its mesh")
    if not (len(in_specs) == len(ins) == len(body.invars) and len(out_specs) == len(outs) == len(body.outvars)):
        raise ProgramError("a shard_map whose specs do not match its values")
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))
    for spec, whole, block in [*zip(in_specs, [a.aval for a in ins], [v.aval for v in body.invars]),
                               *zip(out_specs, [v.aval for v in outs], [v.aval for v in body.outvars])]:
        parts = spec.partitions
        used = [a for p in parts if p is not None and p is not jax.sharding.PartitionSpec.UNCONSTRAINED
                for a in ((p,) if isinstance(p, str) else p)]
        if (len(parts) > len(whole.shape) or not set(used) <= set(sizes) or len(set(used)) != len(used)
                or len(whole.shape) != len(block.shape) or whole.dtype != block.dtype):
            raise ProgramError(f"a shard_map spec {spec} that does not fit its value {whole.str_short()}")
        for d, n in enumerate(whole.shape):
            part = parts[d] if d < len(parts) else None
            axes = () if part is None or part is jax.sharding.PartitionSpec.UNCONSTRAINED else (
                (part,) if isinstance(part, str) else part)
            k = math.prod(sizes[a] for a in axes)
            if n != block.shape[d] * k:
                raise ProgramError(f"a shard_map spec {spec} that does not split {whole.str_short()} into "
                                   f"{block.str_short()}")


def _context(line: int, mesh=None):
    """The context a rebuilt equation runs in: the judge's own, on the mesh it was traced under
    (none, or one rebuilt from the message), with the learner's line kept as metadata (under
    which an equation traced from it keeps it too: graders/kit/jaxpr.py's bind)."""
    base = core.JaxprEqnContext()
    if mesh is None:
        from jax._src.mesh import empty_abstract_mesh as mesh
    if line <= 0 and mesh is base.cur_abstract_mesh:
        return base
    return core.JaxprEqnContext._create(base.compute_type, base.threefry_partitionable, mesh,
                                        base.cur_layout_mode, base.remove_size_one_mesh_axis, base.no_collectives,
                                        ((LINE, str(line)),) if line > 0 else None)


def _list(value) -> list:
    if not isinstance(value, list):
        raise ProgramError("a malformed program")
    return value


def decode(message, custom_policies: bool = False, devices=None, meshes: bool = False,
           donated_as_copies: bool = False) -> Program:
    """The program a worker sent (encode's result after the wire), rebuilt and type-checked; a
    ProgramError for anything else. custom_policies: accept the learner's own checkpoint policies
    as numbers (encode_with_policies), rebuilt as CustomPolicy. meshes: accept a program on a
    mesh of devices (ex3), laid out on `devices` (the judge's own, jax.devices() unless given),
    in their order; refused otherwise. donated_as_copies: a device_put that donates its input
    (refused otherwise) is rebuilt as one that copies it: the same values, placed alike."""
    if isinstance(message, dict) and set(message) == {"unreadable"} and isinstance(message["unreadable"], str):
        raise ProgramError(f"your program holds {message['unreadable'][:300]}")
    if not (isinstance(message, dict) and set(message) in ({"program"}, {"program", "types"})):
        raise ProgramError("no program came back")
    try:
        decoder = _Decoder(custom_policies, devices, meshes, donated_as_copies)
        decoder.typed = _list(message.get("types", []))
        if len(decoder.typed) > MAX_EQUATIONS:
            raise ProgramError("too many sharded types")
        closed = decoder.table(message["program"])
        core.check_jaxpr(closed)
    except ProgramError:
        raise
    except RecursionError:
        raise ProgramError("programs nested too deeply") from None
    except Exception as exc:  # a parameter or type that JAX's own rules refuse
        raise ProgramError(f"it does not type-check ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})") from None
    return Program(closed)


class _NotAlike(Exception):
    """What as_sent meets that decode might rebuild, or refuse, otherwise."""


def as_sent(closed, forward: bool = False, devices=None, donated_as_copies: bool = False,
            custom_policies: bool = False):
    """For a judge in the tracer's own process (no --sandbox, ex7): the traced program `closed`,
    whose encoding encode(closed, forward=forward, meshes=True) made, as decode(that encoding,
    meshes=True, devices=devices, donated_as_copies=donated_as_copies) rebuilds it, without
    encoding's round trip or check_jaxpr (a program JAX traced type-checks): each
    custom_jvp/custom_vjp call a jit of its primal (forward), a donating device_put a copying one
    (donated_as_copies), the constants NumPy arrays, every other equation as traced. None where
    the program holds anything decode might rebuild or refuse otherwise (a mesh on devices in
    another order than the judge lays them out, an equation traced in a context of its own, a
    primitive the judge looks up as another object, an array or constants beyond decode's
    bounds, ...): the caller then decodes the encoding, so both modes read one program.
    custom_policies: a checkpoint policy of the learner's own is replaced by a CustomPolicy, one
    per function, as decode(..., custom_policies=True) rebuilds it: the judge holds none of the
    learner's code."""
    try:
        return _AsSent(forward, devices, donated_as_copies, custom_policies).jaxpr(closed)
    except (_NotAlike, ProgramError, RecursionError):
        return None


class _AsSent:
    def __init__(self, forward: bool, devices, donated_as_copies: bool, custom_policies: bool = False):
        self.forward, self.donated_as_copies = forward, donated_as_copies
        self.custom = {} if custom_policies else None  # id(function) -> (function, its CustomPolicy)
        self.devices = list(devices) if devices is not None else jax.devices()
        self.base = core.JaxprEqnContext()  # what decode's equations are given (_context)
        self.prims = _primitives()
        self.memo: dict = {}
        self.meshes: dict = {}
        self.const_bytes = 0

    def mesh(self, mesh):
        if id(mesh) in self.meshes:
            return
        names, sizes = tuple(mesh.axis_names), tuple(mesh.axis_sizes)
        n = math.prod(sizes)
        if not (0 < len(names) <= MAX_MESH_AXES and all(isinstance(a, str) and 0 < len(a) <= 64 for a in names)
                and len(set(names)) == len(names) and all(type(s) is int and s >= 1 for s in sizes)
                and n <= len(self.devices)):
            raise _NotAlike
        if isinstance(mesh, jax.sharding.Mesh) and (  # laid out as decode lays it out: devices in order
                mesh.devices.shape != sizes or list(mesh.devices.flat) != self.devices[:n]):
            raise _NotAlike
        self.meshes[id(mesh)] = mesh

    def aval(self, aval):
        if math.prod(aval.shape) > MAX_ELEMENTS:
            raise _NotAlike
        if is_key(aval.dtype) and _key_impls().get(aval.dtype._impl.name) is not aval.dtype._impl:
            raise _NotAlike
        mesh = getattr(getattr(aval, "sharding", None), "mesh", None)
        if mesh is not None and not mesh.empty:
            self.mesh(mesh)

    def param(self, value):
        if isinstance(value, core.Jaxpr):
            return self.jaxpr(value)
        if type(value) in (tuple, list):
            new = type(value)(self.param(v) for v in value)
            return value if all(a is b for a, b in zip(new, value)) else new
        if isinstance(value, jax.sharding.NamedSharding):
            if value.mesh.axis_names:
                self.mesh(value.mesh)
            return value
        if isinstance(value, (jax.sharding.Mesh, jax.sharding.AbstractMesh)):
            if value.axis_names:
                self.mesh(value)
            return value
        if isinstance(value, enum.Enum):
            member = (type(value).__name__, value.name)
            if self.donated_as_copies and member in _AS_COPIES:
                kind, name = _AS_COPIES[member]
                return _ENUMS[kind][name]
            if member in _REFUSED_MEMBERS:
                raise _NotAlike
            return value
        if isinstance(value, (flattree.FlatTree, flattree.Either)):
            self.flat(value)
            return value
        if isinstance(value, prng.PRNGImpl):
            if _key_impls().get(value.name) is not value:
                raise _NotAlike
            return value
        if callable(value) and not isinstance(value, type):
            name = policy_name(value)
            if name is None and self.custom is not None:  # as encode sends it: by number, a factory's policy too
                if id(value) not in self.custom:  # one placeholder per function, as decode makes one per number
                    if len(self.custom) >= MAX_CUSTOM_POLICIES:
                        raise _NotAlike
                    self.custom[id(value)] = (value, CustomPolicy(len(self.custom)))
                return self.custom[id(value)][1]
            if name is None or _policies()[name] is not value:
                raise _NotAlike
        return value

    def flat(self, tree):
        """A loop's layout is kept as traced where its leaves are (no program, no enum to rebuild)."""
        if isinstance(tree, flattree.Either):
            leaves = [tree.val]
        elif isinstance(tree, flattree.FTTuple):
            leaves = list(tree.elts)
        elif isinstance(tree, (flattree.FTSingleton, flattree.FTFiltered)):
            leaves = [tree.val]
        elif isinstance(tree, flattree.FTDict):
            leaves = list(tree._vals)
        elif isinstance(tree, flattree.FTPyTree):
            leaves = list(tree.xs)
        else:
            raise _NotAlike
        for leaf in leaves:
            if isinstance(leaf, (flattree.FlatTree, flattree.Either)):
                self.flat(leaf)
            elif self.param(leaf) is not leaf or isinstance(leaf, core.Jaxpr):
                raise _NotAlike

    def literal(self, v):
        """A literal as decode rebuilds it: its value a NumPy scalar of its type's dtype."""
        if not isinstance(v, core.Literal):
            return v
        self.aval(v.aval)
        if is_key(v.aval.dtype):
            raise _NotAlike
        val = np.asarray(v.val, dtype=v.aval.dtype)
        if val.ndim or val.shape != v.aval.shape:
            raise _NotAlike
        if type(v.val) is type(val[()]) and v.val == val[()]:
            return v
        return core.Literal(val[()], v.aval)

    def ctx_alike(self, ctx) -> bool:
        base = self.base
        return (ctx.compute_type == base.compute_type and ctx.threefry_partitionable == base.threefry_partitionable
                and ctx.cur_layout_mode == base.cur_layout_mode
                and ctx.remove_size_one_mesh_axis == base.remove_size_one_mesh_axis
                and ctx.no_collectives == base.no_collectives and not set(ctx.xla_metadata or ()) - {LINE})

    def jaxpr(self, closed):
        if id(closed) in self.memo:
            return self.memo[id(closed)][0]
        consts = list(getattr(closed, "consts", ()) or ())
        if len(consts) != len(closed.constvars):
            raise _NotAlike
        arrays = []
        for v, c in zip(closed.constvars, consts):
            self.aval(v.aval)
            if is_key(v.aval.dtype):  # as decode rebuilds it: from its data, with its implementation's name
                if not is_key(getattr(c, "dtype", None)) or c.dtype != v.aval.dtype or c.shape != v.aval.shape:
                    raise _NotAlike
                data = np.asarray(jax.random.key_data(c))
                arrays.append(_key_of(data, v.aval.dtype._impl.name))
            else:
                data = np.asarray(c)
                if data.shape != v.aval.shape or data.dtype != v.aval.dtype:
                    raise _NotAlike
                arrays.append(data)
            self.const_bytes += data.nbytes
        if self.const_bytes > MAX_CONST_BYTES:
            raise _NotAlike
        for v in closed.invars:
            self.aval(v.aval)
        eqns = []
        for eqn in closed.eqns:
            name = eqn.primitive.name
            if not self.ctx_alike(eqn.ctx):
                raise _NotAlike
            invars = [self.literal(v) for v in eqn.invars]
            for v in eqn.outvars:
                self.aval(v.aval)
            params = {k: self.param(v) for k, v in eqn.params.items()}
            primitive = eqn.primitive
            if name in CUSTOM:
                if not self.forward:
                    raise _NotAlike
                name, primitive = "jit", self.prims.get("jit")
                params = _as_jit(params, len(eqn.invars), len(eqn.outvars), eqn.primitive.name)
            if self.prims.get(name) is not primitive:
                raise _NotAlike
            if _key_misuse(name, params, [v.aval for v in (*eqn.invars, *eqn.outvars)]) is not None:
                raise _NotAlike  # decode refuses it, saying why
            if (any(isinstance(e, core.NamedAxisEffect) for e in eqn.effects)
                    and name not in MESH_PRIMITIVES - {"shard_map"}
                    and not any(isinstance(v, core.Jaxpr) for v in params.values())):
                raise _NotAlike
            for value in params.values():  # decode's rule: a sharding states the rank of what it makes
                if isinstance(value, jax.sharding.NamedSharding) and (
                        not eqn.outvars or len(value.spec) > len(eqn.outvars[0].aval.shape)
                        or not value.mesh.axis_names and len(value.spec) != len(eqn.outvars[0].aval.shape)):
                    raise _NotAlike
            if name == "shard_map":
                _check_shard_map(params, eqn.invars, eqn.outvars)
            if (primitive is not eqn.primitive or any(params[k] is not v for k, v in eqn.params.items())
                    or any(a is not b for a, b in zip(invars, eqn.invars))):
                eqn = eqn.replace(invars=invars, primitive=primitive, params=params)
            eqns.append(eqn)
        outvars = [self.literal(v) for v in closed.outvars]
        same = (all(a is b for a, b in zip(eqns, closed.eqns)) and all(a is c for a, c in zip(arrays, consts))
                and all(a is b for a, b in zip(outvars, closed.outvars)))
        out = closed if same else closed.replace(eqns=eqns, consts=arrays, outvars=outvars)
        self.memo[id(closed)] = (out, closed)  # the traced program kept: ids stay unique
        return out


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


# ---------------------------------------------------------------- tracing a function as it is called
# A function the exercise calls eagerly (an init that places a state) is traced for the judge; a
# few things such code may do are refused or lost by JAX's trace though the call does them. While
# the probe traces it, these make the trace do what the call does.

@contextlib.contextmanager
def no_ops_traced(m):
    """While a function called eagerly under jax.set_mesh(m) is traced: the calls it may make that
    do nothing to its values or their placement, and that JAX refuses inside a trace, do nothing
    there too: block_until_ready and copy_to_host_async on a traced value (they wait for, or start
    copying, the value, which a trace has not computed), is_deleted (a traced value is not deleted)
    and delete (freeing a buffer computes nothing: a wrapper that frees the arrays it returned
    last), and jax.set_mesh(m) with the mesh that is already set (the learner cannot know the
    caller set it). set_mesh with any other mesh still raises JAX's own error. Yields an object
    whose top(fn) is fn entered at the trace's top level: there (only: inside the function's own
    jax.jit the eager call's values are traced too, and have none) a traced value's .sharding,
    which JAX gives concrete arrays only, reads its type's sharding on m, what the eager call's
    array has (a step that checks its inputs' placement before its jitted call); a type on another
    mesh still has none. It is one object per spec, as eagerly every output of one compiled
    program shares its out-sharding object (a step may test `a.sharding is b.sharding`)."""
    from jax._src import sharding_impls
    from jax.sharding import NamedSharding
    enter = sharding_impls.set_mesh.__init__
    no_sharding, deleted = vars(core.Tracer)["sharding"], vars(core.Tracer)["is_deleted"]
    delete = vars(core.Tracer)["delete"]
    skipped = _Skipped()
    shardings = {}

    def set_mesh(self, mesh_):
        if mesh_ is m and not core.trace_state_clean():
            self.prev_abstract_mesh = sharding_impls.abstract_mesh_context_manager.swap_local(m.abstract_mesh)
            self.prev_mesh = sharding_impls.device_context.swap_local(m)
            return
        enter(self, mesh_)

    def sharding(self):
        typed = getattr(self.aval, "sharding", None)
        if (skipped.outer is not None and getattr(self, "_trace", None) is skipped.outer
                and isinstance(typed, NamedSharding) and typed.mesh == m.abstract_mesh):
            if typed.spec not in shardings:
                shardings[typed.spec] = NamedSharding(m, typed.spec)
            return shardings[typed.spec]
        return no_sharding.fget(self)

    added = [name for name in ("block_until_ready", "copy_to_host_async") if name not in vars(core.Tracer)]
    try:
        for name in added:
            setattr(core.Tracer, name, (lambda self: self) if name == "block_until_ready" else (lambda self: None))
        core.Tracer.is_deleted = lambda self: False
        core.Tracer.delete = lambda self: None
        sharding_impls.set_mesh.__init__ = set_mesh
        core.Tracer.sharding = property(sharding)
        yield skipped
    finally:
        core.Tracer.sharding = no_sharding
        core.Tracer.is_deleted = deleted
        core.Tracer.delete = delete
        sharding_impls.set_mesh.__init__ = enter
        for name in added:
            delattr(core.Tracer, name)


class _Skipped:
    """The trace at whose top level a function was entered (top(fn)): no_ops_traced's and
    compiled_calls_traced's."""

    outer = None

    def top(self, fn):
        def at_top(*args, **kwargs):
            self.outer = core.trace_ctx.trace
            return fn(*args, **kwargs)
        return at_top



@contextlib.contextmanager
def compiled_calls_traced():
    """While on, a function compiled ahead of time meanwhile (jax.jit(f).lower(...).compile()) and
    called at the top level of a function entered through the yielded object's top(fn) (the
    learner's step, traced or recorded as a training loop calls it: eagerly) is the jitted call it
    was compiled from: a jit of the very program its lowering traced, with its parameters
    (shardings, donation), as they were when it was lowered, which is what its executable runs.
    JAX refuses to trace a Compiled, and still does here anywhere else: inside the learner's own
    jit, grad, scan or shard_map, where a real run refuses it too. A Compiled whose lowering,
    executable or call was changed since (private attributes) is left as JAX has it."""
    from jax._src import stages
    from jax._src.pjit import jit_p

    lower, compile_, call = stages.Traced.lower, stages.Lowered.compile, stages.Compiled.__call__
    top = _Skipped()

    def lowered(self, *args, **kwargs):
        out = lower(self, *args, **kwargs)
        program = (dict(self._params), tuple(self._consts), self.in_tree, self.out_tree)
        out._traced_from = (program, out._lowering, out.as_text())
        return out

    def compiled(self, *args, **kwargs):
        out = compile_(self, *args, **kwargs)
        origin = getattr(self, "_traced_from", None)
        if origin is not None and self._lowering is origin[1] and self.as_text() == origin[2]:
            out._traced_from = (origin[0], out._executable, out._params)
        return out

    def called(self, *args, **kwargs):
        origin = getattr(self, "_traced_from", None)
        flat, tree = jax.tree.flatten((args, kwargs))
        if origin is not None and top.outer is not None and core.trace_ctx.trace is top.outer:
            (params, consts, in_tree, out_tree), executable, call_params = origin
            if (self._executable is executable and self._params is call_params and tree == in_tree
                    and (self._call is None or self._call is getattr(self, "_call_made", None))):
                return jax.tree.unflatten(out_tree, jit_p.bind(*consts, *flat, **params))
        made = self._call is None
        out = call(self, *args, **kwargs)
        if made and origin is not None:
            self._call_made = self._call  # the call JAX made from this executable
        return out

    stages.Traced.lower, stages.Lowered.compile, stages.Compiled.__call__ = lowered, compiled, called
    try:
        yield top
    finally:
        stages.Traced.lower, stages.Lowered.compile, stages.Compiled.__call__ = lower, compile_, call


# A step that reads its own call's values as numbers (float() of the loss it logs, an f-string
# formatting it) cannot be traced: Python asks a traced value for a number it does not have.
# Called for real it runs, and what it computes is the primitives it binds.

def only_a_trace_refuses(exc: BaseException) -> bool:
    """Whether an error is one only a trace raises: Python asking a traced value for its number
    (float(), int(), bool(), np.asarray) or formatting it with a format spec."""
    if isinstance(exc, (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError,
                        jax.errors.TracerIntegerConversionError)):
        return True
    return isinstance(exc, TypeError) and "Tracer.__format__" in str(exc)


class _Recorder(core.EvalTrace):
    """Eager evaluation, as any call outside a trace runs, that also keeps each primitive it binds
    with its operands, parameters, results and the line that bound it."""

    def __init__(self):
        super().__init__()
        self.log = []

    def process_primitive(self, primitive, args, params, /):
        run = params
        donated = params.get("donated_invars")
        if donated and any(donated):
            # Donation frees the operands, which the grader reads again; it changes no value, and
            # the program keeps it as written.
            run = dict(params, donated_invars=(False,) * len(donated))
        outs = super().process_primitive(primitive, args, run)
        self.log.append((primitive, tuple(args), params, outs, source_info_util.current()))
        return outs


def recorded_call(fn, *args):
    """fn(*args) called for real, eagerly, and the program it ran: every primitive it bound (a
    jitted function's call is one), in order, as a function of args' leaves, every other array
    it read a constant; as jax.make_jaxpr(fn)(*args) would give where the call can be traced.
    Returns (the closed program, the call's own results). The learner's error propagates."""
    flat = jax.tree.leaves(args)
    recorder = _Recorder()
    with core.set_current_trace(recorder):
        out = fn(*args)

    def replay(*values):
        # Arrays are told apart by identity: every one is alive in the log while this runs.
        known = {id(a): v for a, v in zip(flat, values)}
        for primitive, operands, params, outs, source in recorder.log:
            with source_info_util.user_context(source.traceback, name_stack=source.name_stack):
                results = primitive.bind(*(known.get(id(a), a) for a in operands), **params)
            if not primitive.multiple_results:
                outs, results = [outs], [results]
            known.update((id(o), r) for o, r in zip(outs, results))
        return jax.tree.map(lambda o: known.get(id(o), known.get(id(_copied_from(o, recorder.log)), o)), out)

    return jax.make_jaxpr(replay)(*flat), out


def _copied_from(value, log):
    """The array the recorded call computed that a host number it returned is a copy of (the loss
    returned as np.asarray(loss) or loss.item(): no primitive made it, so it would be a constant
    of the program): same shape and every bit, floating point, made by one equation (a jitted
    call may return the loss twice, beside a metrics dict holding it); else None."""
    if isinstance(value, jax.Array) or not isinstance(value, (np.ndarray, np.generic, float)):
        return None
    host = np.asarray(value)
    if host.dtype.kind != "f":
        return None
    found = {}  # equation -> its first output that matches
    for k, (primitive, _, _, outs, _) in enumerate(log):
        for o in (outs if primitive.multiple_results else [outs]):
            if (isinstance(o, jax.Array) and o.shape == host.shape and jax.dtypes.issubdtype(o.dtype, np.floating)
                    and np.array_equal(np.asarray(o).astype(host.dtype), host)):
                found.setdefault(k, o)
    return next(iter(found.values())) if len(found) == 1 else None

@contextlib.contextmanager
def full_placed_as_called():
    """Entered inside the function being traced, at its top level: an array it makes with
    lax.full and a NamedSharding (jnp.zeros, ones, full or empty with device=NamedSharding(...),
    jax.lax.full(..., sharding=...)) is placed there in the program by a device_put, as the eager
    call places it (JAX's trace drops that sharding: "sharding will currently be ignored in jitted
    mode"). Only in the trace entered here: inside the function's own jax.jit (or any other nested
    trace) the eager call drops the sharding too, and the trace is left as JAX makes it."""
    from jax._src.lax import lax as lax_internal
    from jax.sharding import NamedSharding
    outer = core.trace_ctx.trace
    full = lax_internal.full
    public = jax.lax.full

    def placed_full(shape, fill_value, dtype=None, *, sharding=None):
        out = full(shape, fill_value, dtype, sharding=sharding)
        if (isinstance(sharding, NamedSharding) and core.trace_ctx.trace is outer
                and isinstance(out, core.Tracer) and isinstance(sharding.mesh, jax.sharding.Mesh)):
            out = jax.device_put(out, sharding)
        return out

    try:
        lax_internal.full = placed_full
        if public is full:
            jax.lax.full = placed_full
        yield
    finally:
        lax_internal.full = full
        jax.lax.full = public


@contextlib.contextmanager
def single_device_arrays_assembled(*modules):
    """While a function called eagerly is traced: jax.make_array_from_single_device_arrays(shape,
    sharding, blocks) of blocks each put on one device with jax.device_put(block, device) (the way
    multi-host loaders build a global array) is traced as what the eager call computes. JAX
    refuses it in a trace (its blocks are tracers), and a device_put naming one of the worker's
    devices is no program a judge rebuilds. So, in a trace only: jax.device_put(x, device) (a Device
    or a SingleDeviceSharding, or a list, tuple or other pytree prefix of x holding them, as
    jax.device_put(blocks, devices) puts each block on its own device) leaves each value where it
    is and remembers its device; and make_array_from_single_device_arrays lays each block at the
    index its device holds in the sharding (sharding.devices_indices_map: the eager call matches
    blocks to devices by the device each lies on, whatever their order in the list), joins them
    with concatenates, and places the whole on the sharding with a device_put, as the eager call
    places it. Where a replicated index is held by several devices, their blocks are read where
    they agree and are NaN where they differ (the eager array has no one value there: each device
    computes with its own block). A block whose device is unknown (neither put here nor a
    concrete array on one device) leaves the call to JAX, which raises its own error; so do blocks
    of the wrong number or shape.

    A value this trace places on a NamedSharding of a mesh (by jax.device_put, or assembled as
    above) answers `.sharding` with that sharding, as the eager call's array does (a tracer has no
    `.sharding`: optax.tree_map_params(tx, lambda s, p: jax.device_put(s, p.sharding), ...) moves
    a state onto its params' placement); any other tracer still raises JAX's own AttributeError.

    The functions are swapped on the jax module and, for each of `modules` (the learner's), in its
    globals where a name is bound to the very function (`from jax import device_put`); all is put
    back on leaving."""
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    put, make = jax.device_put, jax.make_array_from_single_device_arrays
    sent: dict = {}  # id(block) -> [block, the devices it was put on, in order]
    placed: dict = {}  # id(tracer) -> (tracer, the NamedSharding this trace placed it on)
    tracer_sharding = vars(core.Tracer)["sharding"]

    def one_device(target):
        if isinstance(target, jax.Device):
            return target
        if isinstance(target, jax.sharding.SingleDeviceSharding):
            return next(iter(target.device_set))
        return None

    def remember_placed(out, target):
        if isinstance(target, NamedSharding) and isinstance(target.mesh, jax.sharding.Mesh):
            for leaf in jax.tree.leaves(out):
                if isinstance(leaf, core.Tracer):
                    placed[id(leaf)] = (leaf, target)
        return out

    def kept(v, d):
        v = v if isinstance(v, core.Tracer) else jnp.asarray(v)
        sent.setdefault(id(v), [v, []])[1].append(d)
        return v

    is_target = lambda t: t is None or isinstance(t, (jax.Device, jax.sharding.Sharding))  # noqa: E731

    def device_put(x, device=None, *args, **kwargs):
        if args or core.trace_state_clean():
            return put(x, device, *args, **kwargs)
        d = one_device(device)
        if d is not None:
            return jax.tree.map(lambda v: kept(v, d), x)
        targets = jax.tree.leaves(device, is_leaf=is_target)
        if not any(one_device(t) is not None for t in targets) or not all(is_target(t) for t in targets):
            return remember_placed(put(x, device, **kwargs), device)
        try:  # a pytree of targets, a prefix of x's: each subtree put on its own
            return jax.tree.map(
                lambda t, sub: (jax.tree.map(lambda v: kept(v, one_device(t)), sub) if one_device(t) is not None
                                else remember_placed(put(sub, t, **kwargs), t)),
                device, x, is_leaf=is_target)
        except (ValueError, TypeError):  # not a prefix of x: JAX's own error
            return put(x, device, **kwargs)

    def device_of(block):
        if id(block) in sent and sent[id(block)][0] is block and sent[id(block)][1]:
            return sent[id(block)][1].pop(0)
        if isinstance(block, jax.Array) and not isinstance(block, core.Tracer) and len(block.devices()) == 1:
            return next(iter(block.devices()))
        return None

    def make_array(shape, sharding, arrays, *, dtype=None):
        blocks = list(arrays) if isinstance(arrays, (list, tuple)) else None
        if core.trace_state_clean() or not blocks or not any(
                isinstance(b, core.Tracer) or id(b) in sent for b in blocks):
            return make(shape, sharding, arrays, dtype=dtype)
        shape = tuple(int(n) for n in shape)
        devices = [device_of(b) for b in blocks]
        indices = sharding.devices_indices_map(shape)
        if None in devices or len(set(devices)) != len(devices) or set(devices) != set(indices):
            return make(shape, sharding, arrays, dtype=dtype)  # JAX's own error
        on = dict(zip(devices, blocks))
        cells: dict = {}
        for device, index in indices.items():  # the sharding's device order
            bounds = tuple(s.indices(n)[:2] for s, n in zip(index, shape))
            if tuple(on[device].shape) != tuple(b - a for a, b in bounds):
                return make(shape, sharding, arrays, dtype=dtype)
            cells.setdefault(tuple(a for a, _ in bounds), []).append(on[device])
        starts = [sorted({key[i] for key in cells}) for i in range(len(shape))]

        def agreed(replicas):
            # The replicas of one index: where they differ the eager array has no one value (each
            # device computes with its own), and the program holds NaN there.
            first, others = replicas[0], replicas[1:]
            if not others or not jnp.issubdtype(first.dtype, jnp.inexact):
                return first
            same = functools.reduce(jnp.logical_and, [b == first for b in others])
            return jnp.where(same, first, jnp.nan)

        def joined(prefix, dim):
            if dim == len(shape):
                return agreed(cells[prefix])
            parts = [joined(prefix + (s,), dim + 1) for s in starts[dim]]
            return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=dim)
        whole = joined((), 0)
        if dtype is not None:
            whole = whole.astype(dtype)
        return remember_placed(put(whole, sharding), sharding)

    def sharding(self):
        got = placed.get(id(self))
        if got is not None and got[0] is self:
            return got[1]
        return tracer_sharding.fget(self)

    swapped = [(vars(mod), name, value, device_put if value is put else make_array)
               for mod in modules for name, value in list(vars(mod).items())
               if value is put or value is make]
    try:
        jax.device_put, jax.make_array_from_single_device_arrays = device_put, make_array
        core.Tracer.sharding = property(sharding)
        for space, name, _, mine in swapped:
            space[name] = mine
        yield
    finally:
        jax.device_put, jax.make_array_from_single_device_arrays = put, make
        core.Tracer.sharding = tracer_sharding
        for space, name, theirs, _ in swapped:
            space[name] = theirs


def single_device_puts_dropped(closed):
    """A traced program where a value is put on one device (a device_put to a Device or a
    SingleDeviceSharding, which no judge rebuilds: the device is the worker's) and from there only
    ever placed again on a NamedSharding of a mesh (device_put(device_put(v, device),
    NamedSharding(...))): the first put is dropped, since the second alone computes and places
    the same. Read in the top-level program only (an eager call's puts); a put to one device whose
    value is used any other way, or returned, stays (and the judge refuses it)."""
    from jax.sharding import NamedSharding
    jaxpr = closed.jaxpr
    one = lambda t: isinstance(t, (jax.Device, jax.sharding.SingleDeviceSharding))  # noqa: E731
    onto_mesh = lambda t: isinstance(t, NamedSharding) and isinstance(t.mesh, jax.sharding.Mesh)  # noqa: E731
    ok: dict = {}  # var -> whether every use of it is a re-placement onto a mesh
    for eqn in jaxpr.eqns:
        for i, v in enumerate(eqn.invars):
            if isinstance(v, core.Var):
                again = eqn.primitive.name == "device_put" and onto_mesh(eqn.params["devices"][i])
                ok[v] = ok.get(v, True) and again
    for v in jaxpr.outvars:
        if isinstance(v, core.Var):
            ok[v] = False
    source: dict = {}  # a dropped put's output -> its operand
    eqns = []
    for eqn in jaxpr.eqns:
        invars = [source.get(v, v) if isinstance(v, core.Var) else v for v in eqn.invars]
        if eqn.primitive.name != "device_put":
            eqns.append(eqn.replace(invars=invars) if any(a is not b for a, b in zip(invars, eqn.invars)) else eqn)
            continue
        keep = []
        for i, (v, out) in enumerate(zip(invars, eqn.outvars)):
            if one(eqn.params["devices"][i]) and ok.get(out, False):
                source[out] = v
            else:
                keep.append(i)
        if not keep:
            continue
        params = {k: tuple(val[i] for i in keep) if isinstance(val, tuple) and len(val) == len(eqn.invars) else val
                  for k, val in eqn.params.items()}
        eqns.append(eqn.replace(invars=[invars[i] for i in keep], outvars=[eqn.outvars[i] for i in keep],
                                params=params))
    if not source:
        return closed
    return closed.replace(eqns=eqns)


# ---------------------------------------------------------------- a program's random draws changed
# A program that draws random numbers from a key it makes (jax.random.key(0), a PRNGKey, a key
# constant) computes what that one draw gives: a dropout left on can drop none of the judge's
# values with that key. Run once more with every such key changed, a program whose result does not
# depend on its draws (a keep-everything mask, a scale of 1.0, a permutation undone) returns the
# same values; one that drops, adds noise or scales at random does not.

KEY_SOURCES = frozenset({"random_seed", "random_wrap"})


def draws_random_numbers(closed) -> bool:
    """Whether the program makes a PRNG key (random_seed, random_wrap: jax.random.key, PRNGKey,
    wrap_key_data, a legacy key used) or holds one as a constant, at any depth."""
    seen: set = set()

    def walk(j) -> bool:
        if id(j) in seen:
            return False
        seen.add(id(j))
        if any(is_key(getattr(c, "dtype", None)) for c in getattr(j, "consts", ()) or ()):
            return True
        return any(eqn.primitive.name in KEY_SOURCES or any(walk(s) for s in core.jaxprs_in_params(eqn.params))
                   for eqn in j.eqns)

    return walk(closed)


def keys_changed(closed, change: int):
    """The program with every PRNG key it makes or holds made from other data: random_seed's seed
    and random_wrap's data plus `change` (a uint32, wrapping), each key constant's data plus
    `change`, at any depth. Keys it is given as inputs are left as they are. A ProgramError where
    a key's source cannot be made again so (each is rebuilt as a jit of itself on its operand plus
    the change, traced without a mesh)."""
    change = np.uint32(change)
    memo: dict = {}

    def key_plus(c):
        data = np.asarray(jax.random.key_data(c))
        return jax.random.wrap_key_data(data + change, impl=c.dtype._impl.name)

    def draw_changed(eqn):
        x, primitive, params = eqn.invars[0], eqn.primitive, eqn.params

        def changed(v):
            return primitive.bind(v + np.asarray(change).astype(v.dtype), **params)

        try:
            made = jax.make_jaxpr(jax.jit(changed))(jax.ShapeDtypeStruct(x.aval.shape, x.aval.dtype))
        except Exception as exc:  # noqa: BLE001 (e.g. a key made from a value varying over a mesh axis)
            raise ProgramError(f"a {primitive.name} the grader cannot make again with other data "
                               f"({type(exc).__name__})") from None
        if len(made.eqns) != 1 or made.jaxpr.constvars:
            raise ProgramError(f"a {primitive.name} the grader cannot make again with other data")
        return made.eqns[0].replace(invars=[x], outvars=list(eqn.outvars))

    def param(value):
        if isinstance(value, core.Jaxpr):
            return rewrite(value)
        if type(value) in (tuple, list):
            new = type(value)(param(v) for v in value)
            return value if all(a is b for a, b in zip(new, value)) else new
        return value

    def rewrite(j):
        if id(j) in memo:
            return memo[id(j)][0]
        consts = list(getattr(j, "consts", ()) or ())
        new_consts = [key_plus(c) if is_key(getattr(c, "dtype", None)) else c for c in consts]
        eqns = []
        for eqn in j.eqns:
            if eqn.primitive.name in KEY_SOURCES:
                eqns.append(draw_changed(eqn))
                continue
            params = {k: param(v) for k, v in eqn.params.items()}
            eqns.append(eqn.replace(params=params) if any(params[k] is not v for k, v in eqn.params.items()) else eqn)
        out = j.replace(eqns=eqns, consts=new_consts) if consts else j.replace(eqns=eqns)
        memo[id(j)] = (out, j)  # the original kept: ids stay unique
        return out

    return rewrite(closed)


# ---- a program's draws read apart from its FLOPs
#
# The FLOPs of a program that draws random numbers include the drawing: threefry's hash (tens of
# integer operations per value drawn) and the turning of its bits into a uniform, a normal or a
# coin, which a grader's own program, drawing nothing, does not do; a dropout mask at keep
# probability 1.0 would read as work beyond the technique's share. For the FLOP checks the judge
# compiles a copy in which each value drawn (computed from PRNG keys and random bits alone, with
# constants) is an input of its own, fed values of its type: never a constant, which XLA could fold
# a coin's branch into. What the program computes from its draws and its data still counts.


def _drawn_from(eqn, drawn: set, fixed: set) -> bool:
    """Whether an equation's results are drawn: it makes or draws from keys, or its operands are
    keys, draws, literals or values computed from no input (`fixed`), at least one of them drawn."""
    if eqn.primitive.name in ("random_bits", "random_seed", "random_wrap"):
        return True
    ops = [v for v in eqn.invars if not isinstance(v, core.Literal)]
    return any(v in drawn for v in ops) and all(v in drawn or v in fixed for v in ops)


def work_without_draws(closed):
    """(draws_as_inputs' copy, a jax.ShapeDtypeStruct for each draw it takes) to compile for the
    program's work, or None where the program draws nothing or the copy cannot be made (then the
    program's own count stands): what every FLOP reading that leaves out random draws compiles."""
    try:
        lifted = draws_as_inputs(closed)
    except Exception:  # noqa: BLE001 (a program the copy cannot be made of)
        return None
    if lifted is None:
        return None
    copy, avals = lifted
    return copy, [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals]


def draws_as_inputs(closed):
    """(a copy of the program in which each value drawn that the rest of it uses (not a key) is
    an input appended after its own, the avals of those inputs), or None for a program that draws
    nothing so. Draws are read at the program's top level and in the bodies of its jit calls and
    shard_maps; inside a shard_map a draw comes in replicated (P(): a whole block for each device)."""
    from jax.sharding import PartitionSpec

    def lift(j, drawn: set, fixed: set):
        """(open jaxpr j with the drawn values it uses as trailing invars, those invars)."""
        drawn, fixed = set(drawn), set(fixed) | set(j.constvars)
        drawn |= {v for v in j.invars if is_key(getattr(v.aval, "dtype", None))}
        made: list = []  # drawn values made here that are not keys, in order
        eqns, extra = [], []
        cut: dict = {}

        def use(v):
            if isinstance(v, core.Literal) or v not in drawn or is_key(getattr(v.aval, "dtype", None)) \
                    or v not in made_set:
                return v
            if v not in cut:
                cut[v] = v
                extra.append(v)
            return v

        made_set: set = set()
        for eqn in j.eqns:
            if _drawn_from(eqn, drawn, fixed):
                drawn.update(eqn.outvars)
                for v in eqn.outvars:
                    if not is_key(getattr(v.aval, "dtype", None)):
                        made_set.add(v)
                eqns.append(("drawn", eqn))
                continue
            ops = [v for v in eqn.invars if not isinstance(v, core.Literal)]
            if all(v in fixed for v in ops) and not any(True for _ in core.jaxprs_in_params(eqn.params)):
                fixed.update(eqn.outvars)
            for v in eqn.invars:
                use(v)
            name = eqn.primitive.name
            inner_flags = [not isinstance(v, core.Literal) and v in drawn for v in eqn.invars]
            if name in ("jit", "pjit"):
                inner = eqn.params["jaxpr"]
                iv = inner.jaxpr.invars
                body, vars_ = lift(inner.jaxpr, {a for a, d in zip(iv, inner_flags) if d},
                                   {a for a, b in zip(iv, eqn.invars) if isinstance(b, core.Literal) or b in fixed})
                if vars_:
                    outer = [core.Var(v.aval) for v in vars_]
                    extra.extend(outer)
                    k = len(vars_)
                    p = dict(eqn.params)
                    p["jaxpr"] = inner.replace(jaxpr=body)
                    p["in_shardings"] = tuple(p["in_shardings"]) + (_unspecified(),) * k
                    p["in_layouts"] = tuple(p["in_layouts"]) + (None,) * k
                    p["donated_invars"] = tuple(p["donated_invars"]) + (False,) * k
                    eqn = eqn.replace(invars=[*eqn.invars, *outer], params=p)
            elif name == "shard_map":
                iv = eqn.params["jaxpr"].invars
                body, vars_ = lift(eqn.params["jaxpr"], {a for a, d in zip(iv, inner_flags) if d},
                                   {a for a, b in zip(iv, eqn.invars) if isinstance(b, core.Literal) or b in fixed})
                if vars_:
                    outer = [core.Var(v.aval.update(vma=frozenset()) if hasattr(v.aval, "vma") else v.aval)
                             for v in vars_]
                    extra.extend(outer)
                    p = dict(eqn.params)
                    p["jaxpr"] = body
                    p["in_specs"] = tuple(p["in_specs"]) + (PartitionSpec(),) * len(vars_)
                    eqn = eqn.replace(invars=[*eqn.invars, *outer], params=p)
            eqns.append(("kept", eqn))
        for v in j.outvars:
            use(v)
        if not extra:
            return j, []
        # A drawn value that became an input is no longer made here: the equations that made only
        # such values go (XLA drops the rest of the drawing, which nothing uses then).
        kept = [e if kind == "kept" or not any(v in cut for v in e.outvars)
                else e.replace(outvars=[core.Var(v.aval) if v in cut else v for v in e.outvars])
                for kind, e in eqns if kind == "kept" or not all(v in cut for v in e.outvars)]
        return j.replace(invars=[*j.invars, *extra], eqns=kept), extra

    body, extra = lift(closed.jaxpr, set(), set())
    if not extra:
        return None
    return closed.replace(jaxpr=body), [v.aval for v in extra]


def _unspecified():
    from jax._src.sharding_impls import UNSPECIFIED
    return UNSPECIFIED
