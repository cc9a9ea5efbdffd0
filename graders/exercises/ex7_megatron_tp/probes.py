"""Probes for Exercise 7: the learner's tensor-parallel MLP, training step and state placement,
traced on (data, model) meshes of the 8 CPU devices and sent to the judge as programs
(graders/kit/program.py, issue 31).

What comes back: the program of each forward version on each mesh, of the training step at the
grader's placement (and of its second call, fed back what the first returned), of init_tp_state
and of the step at what init_tp_state returns. The judge rebuilds each on its own devices, runs
it on its own inputs (holding it to its own single-device computation), compiles it for
collectives, FLOPs and output shardings, and reads it with the functions below (read_tp_mlp,
read_shard_map, placement). Nothing here knows an expected value, and nothing the worker says of
a program is believed. The mesh, the specs, `make_tx` and `sharding_key` are shared: the judge
imports them from here.
"""

import collections
import contextlib
import functools
import itertools
import types

import jax
import numpy as np
import optax
from jax._src import core
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from graders.kit import jaxpr, program, verdicts, wire
from graders.kit.placement import sharding_key
from graders.kit.verdicts import fail
from graders.kit.probing import probe

AXES = ("data", "model")
W1_SPEC, W2_SPEC, X_SPEC = P(None, "model"), P("model", None), P("data", None)
PARAM_SPECS = {"w1": W1_SPEC, "w2": W2_SPEC}
# What a probe sends in place of a value the wire cannot carry (the judge says what it was).

_cache: dict = {}  # compiled forwards (several checks read one) and the learner's step functions
_state: dict = {}  # init_tp_state's (params, opt_state), for the step that state_after_step takes


@functools.cache
def mesh(shape):
    """A (data, model) mesh over the first data*model devices (all 8 for the exercise's meshes,
    one for (1, 1)), with Explicit axes (0.12's default)."""
    shape = tuple(int(n) for n in shape)
    return jax.make_mesh(shape, AXES, devices=jax.devices()[:shape[0] * shape[1]])


def make_tx(optimizer: dict):
    """The optax optimizer a config names: {"name": "sgd", "learning_rate", "momentum"} or
    {"name": "adam", "learning_rate"}."""
    if optimizer["name"] == "sgd":
        return optax.sgd(optimizer["learning_rate"], momentum=optimizer["momentum"])
    return optax.adam(optimizer["learning_rate"])


def spec_of(value) -> str:
    sharding = getattr(value, "sharding", None)
    if sharding is None:
        return f"a {type(value).__name__} not placed on the mesh"
    return str(getattr(sharding, "spec", sharding))


def mesh_sizes(value):
    """The axis sizes of the mesh a returned array is placed on, e.g. {"data": 2, "model": 4}, or
    None when it is not placed on a named mesh."""
    try:
        return {str(k): int(v) for k, v in value.sharding.mesh.shape.items()}
    except Exception:  # no sharding, or one without a mesh
        return None


def placed_as(value, ndim: int) -> dict:
    """How a returned array is placed: {"key": sharding_key, "spec": what to show the learner,
    "mesh": the axis sizes of its mesh}."""
    return {"key": sharding_key(getattr(value, "sharding", None), ndim), "spec": spec_of(value),
            "mesh": mesh_sizes(value)}


def put(m, a, spec):
    return jax.device_put(np.asarray(a, np.float32), NamedSharding(m, spec))


@contextlib.contextmanager
def on_mesh(m):
    """jax.set_mesh(m), with JAX's errors about the learner's shardings turned into advice."""
    try:
        with jax.set_mesh(m):
            yield
    except Exception as exc:  # JAX raises ValueError, TypeError or its own ShardingTypeError
        text = str(exc)
        first = text.split("\n")[0].split(". ")[0]
        if "out_specs" in text and "can't be statically inferred" in text:
            fail("your shard_map's result still varies across 'model', which out_specs=P('data', None) cannot "
                 "accept: each device returns only its own partial sum (no psum at all, or a psum over 'data' "
                 "only), or a result computed from weights gathered with lax.all_gather, which shard_map still "
                 "counts as varying. Hint: add the partial sums of the 'model' axis with lax.psum(partial, 'model').")
        if "in_specs passed to shard_map" in text and "does not match" in text:
            fail(f"your shard_map's in_specs do not match how the arguments arrive ({first}). w1 arrives "
                 "P(None, 'model') (split by columns), w2 P('model', None) (split by rows) and x P('data', None). "
                 "Hint: in_specs=(P(None, 'model'), P('model', None), P('data', None)); splitting w2 by columns "
                 "instead would force a gather of the activations.")
        if "should match the mesh passed to shard_map" in text:
            fail(f"your shard_map is bound to another mesh than the one it runs on ({first}): a mesh with "
                 "hard-coded axis sizes, or a shard_map made once for the first mesh it met. Hint: build "
                 "jax.shard_map(..., mesh=mesh) inside make_tp_mlp_shard_map(mesh) with the mesh you are given.")
        if "Contracting dimensions are sharded" in text:
            fail("JAX could not tell where the second matmul's result should live: its contracting dim (the "
                 "hidden units) is split over 'model', so the result is a sum of partial sums. Hint: "
                 "jnp.matmul(h, w2, out_sharding=P('data', None)).")
        raise


def learner_forward(sol, version: str, m):
    if version == "tp_mlp":
        f = sol.tp_mlp
    else:
        f = sol.make_tp_mlp_shard_map(m)
        if not callable(f):
            fail(f"make_tp_mlp_shard_map(mesh) should return a function of (w1, w2, x), got {type(f).__name__}.")
    return f


def forward_args(m, w1, w2, x):
    return put(m, w1, W1_SPEC), put(m, w2, W2_SPEC), put(m, x, X_SPEC)


# Without --sandbox the probes run in the judge's own process, which set its nonce here
# (IN_PROCESS["judge"]): a program's encoding and the traced program itself are then filed here
# (IN_PROCESS[(nonce, number)]) and the reply holds {"in_process": number} in its place, so that
# it does not go through the wire's encoding and back; the judge takes them back only from its own
# process's dict and reads the traced program as decoding would rebuild it (program.as_sent),
# decoding the encoding only where the two might differ. Under --sandbox nothing the worker does
# reaches that dict. Either way the program is encoded first, so what cannot be sent is refused
# alike (its reason is sent, never filed).
IN_PROCESS: dict = {}


def _encoded(closed, sol) -> dict:
    """A traced program as data (graders/kit/program.py, issue 31), or the reason it cannot be
    sent. forward=True: the judge only runs these programs forwards (the step already holds its
    backward pass), so a custom_jvp/custom_vjp call (jax.nn.relu) is sent as its primal, and a
    checkpoint policy of the learner's own as its number (custom_policies: lowering and running a
    checkpoint never calls its policy)."""
    message = program.encode_or_reason(closed, getattr(sol, "__file__", ""), forward=True, meshes=True,
                                       drop_prints=True, custom_policies=True)
    judge = IN_PROCESS.get("judge")
    if judge is None or "program" not in message:
        return message
    number = sum(1 for key in IN_PROCESS if isinstance(key, tuple))
    IN_PROCESS[(judge, number)] = (message, closed)
    return {"in_process": number}


@probe
def forward_program(sol, version, shape, w1, w2, x):
    """One version ("tp_mlp" or "shard_map") traced on one mesh at these inputs' shapes, placed as
    the exercise places them: its program, as data. The judge rebuilds it on its own devices, runs
    it on its own inputs, compiles it and reads it (checks.forward)."""
    m = mesh(shape)
    args = forward_args(m, w1, w2, x)
    with on_mesh(m):
        closed = jax.make_jaxpr(learner_forward(sol, version, m))(*args)
    return _encoded(closed, sol)


def spec_entries(var):
    """The PartitionSpec of a traced value's type, entry by entry (None, an axis name, or a tuple
    of names), or None when its type carries none."""
    spec = getattr(getattr(var.aval, "sharding", None), "spec", None)
    if spec is None:
        return None
    return tuple(e if e is None or isinstance(e, str)
                 else tuple(str(a) for a in e) if isinstance(e, tuple) else str(e) for e in spec)


# What makes a returned value is looked for through the wrappers a right solution may put around
# its work (jit, checkpoint, custom_jvp/vjp) and through reshapes and transposes, which move no
# data between devices: psum(partial.T, "model").T returns the psum's result.
THROUGH = ("jit", "checkpoint", "custom")


# A reshard or sharding constraint to the sharding its operand's type already has moves nothing:
# reshard(matmul(h, w2, out_sharding=P('data', None)), P('data', None)) returns the matmul's result.
NO_OP_WHEN_SAME = frozenset({"reshard", "sharding_constraint"})


def _same_sharding_type(eqn) -> bool:
    try:
        a, b = eqn.invars[0].aval.sharding, eqn.outvars[0].aval.sharding
        return a.spec == b.spec and a.mesh == b.mesh
    except (AttributeError, IndexError):  # an operand or a type without a sharding
        return False


def _output_source(program):
    """jaxpr.output_source(program, through=THROUGH, layout=True), also looking through a reshard
    or sharding constraint that moves nothing (NO_OP_WHEN_SAME)."""
    body = getattr(program, "jaxpr", program)
    var = body.outvars[0]
    while True:
        eqn = next((e for e in body.eqns if any(v is var for v in e.outvars)), None)
        if eqn is None:
            return None
        if eqn.primitive.name in NO_OP_WHEN_SAME and len(eqn.invars) == 1 and _same_sharding_type(eqn):
            var = eqn.invars[0]
            continue
        if (eqn.primitive.name in jaxpr.SHAPE_ONLY and eqn.invars and not jaxpr._is_literal(eqn.invars[0])):
            var = eqn.invars[0]
            continue
        inner = jaxpr._wrapped(eqn, THROUGH)
        if inner is None:
            return eqn
        position = next(i for i, v in enumerate(eqn.outvars) if v is var)
        body, var = inner, inner.outvars[position]


def output_source(program) -> tuple:
    """(what makes the program's output: jaxpr.output_source through THROUGH and layout ops, and
    through a reshard that moves nothing, or None, None), or (None, what it raised): the check that
    reads the output's source says that, at the point where it reads it, and not before."""
    try:
        return _output_source(program), None
    except Exception as exc:  # e.g. a program with no output at all
        message = " ".join(str(exc).split())[:600]
        return None, f"{type(exc).__name__}{': ' + message if message else ''}"


def _source_name(eqn):
    return None if eqn is None else eqn.primitive.name


def read_tp_mlp(closed, m) -> dict:
    """In the judge, tp_mlp's program as the judge rebuilt it on mesh m, its dead code removed:
    every matmul's contracting dims, how its operands' types are split, the out_sharding it states
    (as given, and as a sharding_key on this mesh), whether its result is what tp_mlp returns; and
    the primitive that makes the output (or why it could not be read)."""
    program = jaxpr.live(closed)
    source, source_error = output_source(program)
    out_spec = getattr(getattr(getattr(program.outvars[0], "aval", None), "sharding", None), "spec", None) \
        if program.outvars else None
    try:
        output_key = None if out_spec is None else sharding_key(NamedSharding(m, out_spec), 2)
    except Exception:  # not a spec this mesh can hold
        output_key = None
    dots = []
    for eqn in jaxpr.find(program, "dot"):
        (lhs_c, rhs_c), _ = eqn.params["dimension_numbers"]
        stated = getattr(eqn.params.get("out_sharding"), "spec", eqn.params.get("out_sharding"))
        try:
            stated_key = None if stated is None else sharding_key(NamedSharding(m, stated), 2)
        except Exception:  # not a spec this mesh can hold
            stated_key = None
        dots.append({"lhs_contracting": tuple(int(d) for d in lhs_c),
                     "rhs_contracting": tuple(int(d) for d in rhs_c),
                     "lhs_spec": spec_entries(eqn.invars[0]), "rhs_spec": spec_entries(eqn.invars[1]),
                     "stated": str(stated), "stated_key": stated_key, "is_output": source is eqn})
    return {"dots": dots, "output_source": _source_name(source), "output_source_error": source_error,
            "output_key": output_key}


def _axes(eqn):
    """An equation's `axes` parameter (a psum's axis names) as plain data, None if not a sequence."""
    axes = eqn.params.get("axes", ())
    if not isinstance(axes, (tuple, list)):
        return None
    return tuple(a if isinstance(a, (str, int)) else str(a) for a in axes)


def device_shape(aval) -> tuple:
    """The shape of one device's block of a traced value: its type's shape divided along every dim
    its type's spec splits over mesh axes (in a shard_map manual over some axes only, the others
    still split the body's values by type; a fully manual body's values are typed unsplit)."""
    shape = [int(d) for d in aval.shape]
    sharding = getattr(aval, "sharding", None)
    spec, sizes = getattr(sharding, "spec", None), getattr(getattr(sharding, "mesh", None), "shape", None)
    if spec is None or not sizes:
        return tuple(shape)
    for i, entry in enumerate(tuple(spec)[:len(shape)]):
        for axis in (entry if isinstance(entry, tuple) else (entry,)):
            n = sizes.get(axis, 1) if axis is not None else 1
            if n > 1 and shape[i] % n == 0:
                shape[i] //= n
    return tuple(shape)


def read_shard_map(closed) -> dict:
    """In the judge, the shard_map version's program as the judge rebuilt it, its dead code
    removed: how many shard_maps it holds, its primitives, what makes its output; when that is a
    shard_map, every equation of the body (primitive, `axes` parameter, first operand's shape,
    whether it makes the body's output) and what makes the body's output (or why it could not be
    read)."""
    program = jaxpr.live(closed)
    source, source_error = output_source(program)
    summary = {"shard_maps": len(jaxpr.find(program, "shard_map")),
               "primitives": sorted(jaxpr.primitive_names(program)),
               "output_source": _source_name(source), "output_source_error": source_error,
               "body": None, "body_output_source": None, "body_output_source_error": None}
    if source is not None and jaxpr.is_a(source, "shard_map"):
        body = source.params["jaxpr"]
        last, summary["body_output_source_error"] = output_source(body)
        summary["body"] = [
            {"primitive": e.primitive.name,
             "axes": _axes(e),
             "operand_shape": (tuple(int(d) for d in e.invars[0].aval.shape)
                               if e.invars and hasattr(e.invars[0].aval, "shape") else None),
             "operand_shapes": [device_shape(v.aval) for v in e.invars if hasattr(v.aval, "shape")],
             "is_output": e is last}
            for e in jaxpr.walk(body)]
        summary["body_output_source"] = _source_name(last)
    return summary


def learner_step(sol, optimizer: dict, shape):
    """The learner's step for this optimizer and mesh, as make_tp_train_step returned it (made
    once, so that every call reuses its compiled program)."""
    key = ("step", sol, tuple(sorted(optimizer.items())), tuple(shape))
    if key not in _cache:
        step = sol.make_tp_train_step(mesh(shape), make_tx(optimizer))
        if not callable(step):
            fail(f"make_tp_train_step(mesh, tx) should return a function step(params, opt_state, x, y), "
                 f"got {type(step).__name__}.")
        _cache[key] = step
    return _cache[key]


def placed_training(m, optimizer: dict, w1, w2, x, y):
    """The grader's own placement: params split Megatron-style, the state made from them."""
    params = {"w1": put(m, w1, W1_SPEC), "w2": put(m, w2, W2_SPEC)}
    return params, make_tx(optimizer).init(params), put(m, x, X_SPEC), put(m, y, X_SPEC)


def check_step_output(out) -> None:
    """The step's result as traced: (params, opt_state, loss) with params a dict of w1 and w2."""
    if not isinstance(out, tuple) or len(out) != 3:
        fail(f"step should return (params, opt_state, loss), got {type(out).__name__}"
             f"{f' of length {len(out)}' if isinstance(out, tuple) else ''}.")
    if not isinstance(out[0], dict) or set(out[0]) != set(PARAM_SPECS):
        fail(f"step should return params as a dict with keys 'w1' and 'w2', got {type(out[0]).__name__}.")


@probe
def step_program(sol, optimizer, shape, w1, w2, x, y):
    """The learner's training step for this optimizer and mesh, traced (as called, jitted or not)
    at the grader's placement (params split Megatron-style, the state tx.init makes from them, x
    and y by rows): its program, as data. The judge rebuilds it, runs it, compiles it and reads
    what it calls (checks.step)."""
    m = mesh(shape)
    step = learner_step(sol, optimizer, shape)
    with on_mesh(m):
        args = placed_training(m, optimizer, w1, w2, x, y)
        # The second call's batch: other arrays placed like the first's, as a training loop's next
        # step is given (a step may tell a batch it was given before by identity).
        batch = put(m, np.asarray(x)[::-1], X_SPEC), put(m, np.asarray(y)[::-1], X_SPEC)
    maker = step_maker(sol, lambda module: module.make_tp_train_step(mesh(shape), make_tx(optimizer)))
    closed, out = step_read(m, step, args, maker)
    check_step_output(out)
    return {"step": _encoded(closed, sol), "fed_back": fed_back(sol, m, step, *args, *batch, maker=maker)}


def step_maker(sol, make):
    """What makes a step to call for real: make(the learner's module as imported), what a training
    script calls; or, where that module's state holds a tracer (one the grader's own traces left
    there, which no real run has: holds_a_tracer), make(the learner's file imported afresh), which
    stands in sys.modules while its step runs (where pickle finds the classes it defines)."""
    def made():
        if not holds_a_tracer(sol):
            return make(sol)
        module = verdicts.imported_afresh(sol)
        step = make(module)

        def standing(*args):
            with verdicts.standing_in(module):
                return step(*args)
        return standing
    return made


# How far holds_a_tracer looks: containers nested this deep, this many values in all.
STATE_DEPTH, STATE_VALUES = 6, 20_000


def holds_a_tracer(module) -> bool:
    """Whether the learner's module state holds a jax tracer: its globals, what containers among
    them hold, and the attributes of any object (a namespace, an instance, a function's closure,
    defaults and attributes, a partial's arguments), STATE_DEPTH levels deep, STATE_VALUES in all."""
    name = module.__name__
    stack = [(v, 0) for k, v in vars(module).items() if not k.startswith("__")]
    seen = set()
    while stack and len(seen) < STATE_VALUES:
        value, depth = stack.pop()
        if isinstance(value, core.Tracer):
            return True
        if (id(value) in seen or depth >= STATE_DEPTH
                or isinstance(value, (types.ModuleType, str, bytes, int, float, complex, np.ndarray, jax.Array))
                # a library's classes and functions hold no state of the learner's
                or (isinstance(value, (type, types.FunctionType)) and getattr(value, "__module__", None) != name)):
            continue
        seen.add(id(value))
        stack.extend((c, depth + 1) for c in itertools.islice(_held_by(value), STATE_VALUES))
    return False


def _held_by(value):
    """What a value of the learner's state holds, for holds_a_tracer to look into."""
    if isinstance(value, dict):
        yield from value.keys()
        yield from value.values()
    elif isinstance(value, (list, tuple, set, frozenset, collections.deque)):
        yield from value
    elif isinstance(value, functools.partial):
        yield value.func
        yield from value.args
        yield from value.keywords.values()
    else:
        if isinstance(value, types.FunctionType):
            yield from value.__defaults__ or ()
            yield from (c.cell_contents for c in value.__closure__ or () if _filled(c))
        try:
            held = vars(value)
        except TypeError:  # no __dict__ (slots, a builtin)
            return
        yield from list(held.values())


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # an empty cell
        return False
    return True


def tracer_held(closed) -> bool:
    """Whether a program took a tracer of an earlier trace as a constant."""
    return any(isinstance(c, core.Tracer) for c in closed.consts)


def step_read(m, step, args, maker):
    """The program of step(*args): step_traced's; or, where both its attempts fail only as a trace
    does (program.only_a_trace_refuses: a wrapper that logs float() of this call's loss, or
    formats it), the program the same call ran when called for real under jax.set_mesh(m)
    (program.recorded_call), with the no-ops JAX refuses in a trace skipped, of a step maker()
    makes (step_maker: of the learner's module as imported, or, where its state holds a tracer of
    the grader's traces, imported afresh). Returns (program, what the call returned); where the call
    fails for real too, that error propagates. The call is read for real also where the trace took
    a tracer of an earlier trace as a constant: a value the grader's own traces left in the
    learner's state (a counter kept in a module-level dict), which no real call meets."""
    errors = []
    try:
        closed, out = step_traced(m, step, *args, errors=errors)
    except Exception as exc:  # noqa: BLE001 (raised again below unless the call runs for real)
        if not (errors and all(map(program.only_a_trace_refuses, errors))):
            raise
        error = exc
    else:
        if not tracer_held(closed) or maker is None:
            return closed, out
        error = None
    if maker is None:
        raise error from None
    # Where the real call fails too, its error is the one said: what a training loop meets.
    real = maker()
    with on_mesh(m), program.no_ops_traced(m), program.compiled_calls_traced() as compiled:
        return program.recorded_call(compiled.top(real), *args)


def fed_back(sol, m, step, *args, maker=None) -> dict:
    """The step's second call when fed back the very params and state its first call returned (as
    a training loop feeds them: the same objects), with another batch (args: the first call's four,
    then the second call's x and y): both calls traced as one function (step_traced), the program
    of the second cut out as a function of what the first returned and its batch (second_call), as
    data; or {"error": the learner's error} where the second call fails, or {"unread": why} where
    the second call's program is no function of those alone, or where the chained trace fails only
    as a trace does (program.only_a_trace_refuses, in both of step_traced's attempts: Python that reads the first
    call's results as numbers runs eagerly, and the single call traced). The judge reads it where
    it is not the first call's program. Where the chained trace fails only as a trace does, or the
    cut reads the first call's inputs or values its operations computed and did not return, the
    second call is read after a first call run for real instead (after_a_real_first_call), so that
    the values the second call reads are the very ones a training loop's second call reads."""
    def twice(params, state, x, y, x2, y2):
        first = step(params, state, x, y)
        check_step_output(first)
        return first, step(first[0], first[1], x2, y2)
    n = len(jax.tree.leaves(args[:2]))
    errors = []
    try:
        closed, (first, second) = step_traced(m, twice, *args, errors=errors)
        check_step_output(second)
    except Exception as exc:  # noqa: BLE001 (the learner's error, or the step's wrong result)
        if errors and all(map(program.only_a_trace_refuses, errors)):
            real = after_a_real_first_call(m, maker, *args)
            if real is not None:
                return _real_encoded(*real, sol)
            return {"unread": "the chained calls cannot be traced: " + type(exc).__name__}
        return {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}
    cut = second_call(closed, len(jax.tree.leaves(first[:2])), len(jax.tree.leaves(first)), n)
    if isinstance(cut, str) or cut[1]:
        real = after_a_real_first_call(m, maker, *args)
        if real is not None:
            return _real_encoded(*real, sol)
    if isinstance(cut, str):
        return {"unread": cut}
    cut, hidden = cut
    return {"cut": _encoded(cut, sol), "hidden": hidden} if hidden else _encoded(cut, sol)


def _real_encoded(closed, values, sol) -> dict:
    """after_a_real_first_call's program as data, with the values its hidden inputs were left."""
    message = _encoded(closed, sol)
    return {"cut": message, "hidden": len(values), "values": values} if values else message


def after_a_real_first_call(m, maker, params, state, x, y, x2, y2):
    """The second call of a step that make_tp_train_step makes afresh (maker(), step_maker's: of the
    learner's module as imported, or, where its state holds a tracer of the grader's traces, of the
    learner's file imported afresh), run first for real
    (eagerly, under jax.set_mesh(m), as a training loop runs it) and then traced alone fed back the
    very arrays it returned (params and state) and another batch: its program as a function of
    those (and of the loss the first call returned, an input between the state and x, where it
    reads that array), then of what else it reads that the real first call left (a device step
    counter the wrapper carries, a batch or gradients it kept), inputs sent with their values
    ({"cut": program, "hidden": how many, "values": a host copy of each}): held as constants,
    XLA would fold the collectives and work on them away. An array it reads that equals a returned
    params or state leaf exactly (type, placement and every value: a kept copy of what it returned)
    is that input; one of a single element only beside a larger one (a kept copy of the whole).
    Python that reads the first call's results as numbers (float() of the last loss) then reads
    numbers. None where that cannot be done (the learner's error, or a step that returns one array
    twice among its params and state): the chained trace's reading stands."""
    if maker is None:
        return None
    try:
        step = maker()
        # (A step compiled ahead of time in this call is then read in the second's recording.)
        with on_mesh(m), program.compiled_calls_traced():
            first = step(params, state, x, y)
        check_step_output(first)
        second_call_of = lambda a, b: step(first[0], first[1], a, b)  # noqa: E731
        closed, second = step_read(m, second_call_of, (x2, y2), lambda: second_call_of)
        check_step_output(second)
    except Exception:  # noqa: BLE001 (the chained trace's reading, or its error, is sent instead)
        return None
    fed = jax.tree.leaves(first[:2])
    position = {id(a): i for i, a in enumerate(fed)}
    if len(position) != len(fed) or id(first[2]) in position:
        return None
    ins, loss, constvars, consts, hidden, values = [None] * len(fed), [], [], [], [], []
    same = {}  # a constant's var -> the input var it reads the value of
    budget = program.MAX_CONST_BYTES
    alike = {}  # a constant's position -> the fed leaf it equals (not the very array)
    for k, c in enumerate(closed.consts):
        if id(c) not in position and c is not first[2] and isinstance(c, jax.Array):
            j = next((j for j, a in enumerate(fed) if equal_array(c, a)), None)
            if j is not None:
                alike[k] = j
    # A value of one element (a count, a divisor) equals a fed leaf by chance as easily as by being
    # its copy: it is taken as that leaf only beside a larger kept copy of what the call returned.
    if not any(np.size(closed.consts[k]) > 1 for k in alike):
        alike = {}
    # The largest first, should there be more than MAX_HIDDEN: a few small values (logged losses)
    # must not push the arrays a step computes on out of the inputs.
    order = sorted(range(len(closed.consts)), key=lambda k: -getattr(closed.consts[k], "nbytes", 0))
    for k in order:
        v, c = closed.constvars[k], closed.consts[k]
        i = position.get(id(c), alike.get(k))
        if i is not None:
            if ins[i] is None:
                ins[i] = v
            else:
                same[v] = ins[i]
        elif c is first[2]:
            loss.append(v)
        elif isinstance(c, jax.Array) and getattr(c.dtype, "name", None) in wire._DTYPES:
            if len(hidden) == MAX_HIDDEN or c.nbytes > budget:
                # Held as a constant, XLA would fold its collectives away: the chained trace's
                # reading stands instead.
                return None
            budget -= c.nbytes
            hidden.append(v)
            values.append(np.asarray(c))
        else:  # a PRNG key, a NumPy constant: a constant as in any program
            constvars.append(v)
            consts.append(c)
    # A fed array the second call never reads is an input it leaves unread.
    ins = [v if v is not None else core.Var(jax.typeof(a)) for v, a in zip(ins, fed)]
    eqns, outvars = closed.jaxpr.eqns, closed.jaxpr.outvars
    if same:
        def read(vs):
            return [same.get(v, v) if isinstance(v, core.Var) else v for v in vs]
        eqns = [e.replace(invars=read(e.invars)) for e in eqns]
        outvars = read(outvars)
    real = closed.replace(constvars=constvars, consts=consts, invars=[*ins, *loss, *hidden, *closed.invars],
                          eqns=eqns, outvars=outvars)
    return real, values


# At most this many values the first call left come in as inputs of the second call's program
# (checks.fed_back_program reads no more); with more, the chained trace's reading stands. The
# values' bytes are bounded by program.MAX_CONST_BYTES.
MAX_HIDDEN = 1024


def equal_array(a, b) -> bool:
    """Whether two arrays are one value: type (shape, dtype, placement) and every element."""
    try:
        return (a.shape == b.shape and a.dtype == b.dtype and a.sharding == b.sharding
                and bool(np.array_equal(np.asarray(a), np.asarray(b))))
    except Exception:  # noqa: BLE001 (an array that cannot be read on the host: not told equal)
        return False


def second_call(closed, fed: int, first: int, inputs: int):
    """From the program of two chained calls (inputs: the first call's `inputs` params and state
    leaves, its x and y, then the second call's x and y; outputs: the first call's `first` leaves,
    its `fed` params and state leaves leading and its loss last, then the second call's), the
    second call's own program: what it computes from the values it was fed (the first call's
    params and state, its own x and y) and, where it reads it (a wrapper that carries it to the
    next call), the loss the first call returned, an input between the state and x, then (hidden)
    the values the first call's own operations computed and did not return that the second reads
    (an array a wrapper carries between calls: a device step counter); or why it is no function of
    those (it reads the first call's inputs, or is fed one value twice or a constant). Returns
    (the program, how many hidden inputs it takes) or that reason."""
    ins = list(closed.outvars[:fed]) + list(closed.invars[inputs + 2:inputs + 4])
    outs = list(closed.outvars[first:])
    if not all(isinstance(v, core.Var) for v in ins) or len(set(map(id, ins))) != len(ins):
        return "the step returned one array twice, or a constant, among its params and state"
    returned = [v for v in closed.outvars[fed:first] if isinstance(v, core.Var) and id(v) not in set(map(id, ins))]
    given = set(map(id, ins + returned))
    needed = {id(v) for v in outs if isinstance(v, core.Var) and id(v) not in given}
    eqns, hidden = [], []
    for eqn in reversed(closed.eqns):
        if not any(id(v) in needed for v in eqn.outvars):
            continue
        if any(id(v) in given for v in eqn.outvars):
            # An operation of the first call (it made what the first call returned): what else
            # of it the second call reads comes in as an input of its own.
            hidden[:0] = [v for v in eqn.outvars if id(v) in needed]
            needed -= {id(v) for v in hidden}
            continue
        eqns.append(eqn)
        needed |= {id(v) for v in eqn.invars if isinstance(v, core.Var) and id(v) not in given}
    eqns.reverse()
    needed -= {id(v) for eqn in eqns for v in eqn.outvars}
    kept = [(v, c) for v, c in zip(closed.constvars, closed.consts) if id(v) in needed]
    if needed - {id(v) for v, _ in kept}:
        return "its second call reads the arrays its first call was given"
    read = {id(v) for eqn in eqns for v in eqn.invars} | set(map(id, outs))
    ins[fed:fed] = [v for v in dict.fromkeys(returned) if id(v) in read] + hidden
    return closed.replace(constvars=[v for v, _ in kept], consts=[c for _, c in kept], invars=ins, outvars=outs,
                          eqns=eqns, effects=core.join_effects(*(e.effects for e in eqns))), len(hidden)


def step_traced(m, step, *args, errors=None):
    """The learner's step traced at these arguments under jax.set_mesh(m); where that fails, again
    with the no-ops JAX refuses in a trace skipped (program.no_ops_traced: a wrapper that enters
    jax.set_mesh(mesh) with the mesh already set, waits with .block_until_ready(), starts
    .copy_to_host_async(), asks .is_deleted() or reads its inputs' .sharding does nothing to the
    step's values or placement). Where that fails too, the learner's own error of the first attempt
    propagates (both attempts' errors appended to `errors`, where given). In both, a step compiled
    ahead of time is traced as the jit it was compiled from where it is called at the step's top
    level, as a training loop calls it (program.compiled_calls_traced)."""
    errors = [] if errors is None else errors
    try:
        with on_mesh(m), program.compiled_calls_traced() as compiled:
            return jax.make_jaxpr(compiled.top(step), return_shape=True)(*args)
    except Exception as exc:  # noqa: BLE001 (said below unless the no-ops were all that failed)
        error = exc
        errors.append(exc)
    try:
        with on_mesh(m), program.no_ops_traced(m) as skipped, program.compiled_calls_traced() as compiled:
            return jax.make_jaxpr(skipped.top(compiled.top(step)), return_shape=True)(*args)
    except Exception as exc:  # noqa: BLE001 (the learner's error of the plain trace is said)
        errors.append(exc)
        raise error from None


def placement(params, state, paths) -> dict:
    """How params['w1'], params['w2'] and every leaf of the optimizer state (named by their paths)
    are placed: in the judge, of the arrays it computed; in the worker, of init_tp_state's own."""
    return {"params": {k: placed_as(params[k], 2) for k in PARAM_SPECS},
            "leaves": [{"path": str(path), "shape": tuple(int(d) for d in getattr(leaf, "shape", ())),
                        "placed": placed_as(leaf, getattr(leaf, "ndim", len(getattr(leaf, "shape", ()))))}
                       for path, leaf in zip(paths, state)]}


def traced(m, fn, *args):
    """jax.make_jaxpr(fn, return_shape=True)(*args) under jax.set_mesh(m), as the learner's code
    runs; a function that places values on a mesh of its own (which eager code may do under
    another context mesh, and tracing may not) is traced outside any context mesh instead."""
    try:
        with on_mesh(m):
            return jax.make_jaxpr(fn, return_shape=True)(*args)
    except Exception:  # noqa: BLE001 (traced again below, where the learner's own error propagates)
        pass
    return jax.make_jaxpr(fn, return_shape=True)(*args)


def called(m, fn, *args):
    """fn(*args) run eagerly under jax.set_mesh(m), as the learner's code runs; like `traced`, a
    function that places values on devices of its own (which JAX refuses under a context mesh of
    other devices) is run outside any context mesh instead."""
    try:
        with on_mesh(m):
            return fn(*args)
    except Exception:  # noqa: BLE001 (run again below, where the learner's own error propagates)
        pass
    return fn(*args)


def placed_constants(tree):
    """init_tp_state's output, where an array it made outside the trace (a constant of the
    program: jax.make_array_from_callback cannot take traced values) is put back where it lies
    by a device_put in the program, so the judge places the constant's values itself."""
    def put_back(a):
        if isinstance(a, jax.Array) and not isinstance(a, jax.core.Tracer) and isinstance(a.sharding, NamedSharding):
            whole = np.array(a)
            if np.issubdtype(whole.dtype, np.inexact):
                # Replicas of an index that differ (a callback serving one index twice with other
                # values): the array has no one value there, each device computing with its own.
                for shard in a.addressable_shards:
                    block = whole[shard.index]
                    block[np.asarray(shard.data) != block] = np.nan
            return jax.device_put(whole, a.sharding)
        return a
    return jax.tree.map(put_back, tree)


def init_traced(sol, m, tx, host):
    """init_tp_state traced on mesh m: over the params given as inputs; where that fails, over
    the host arrays themselves (which the program then holds as constants); where both fail, both
    again with the no-ops of program.no_ops_traced skipped and a global array made from blocks on
    single devices assembled as the eager call assembles it (program.single_device_arrays_assembled,
    given the learner's module: its own names of jax.device_put and of the assembling function are
    swapped too). In the program traced, a put on one device whose value is only ever placed again
    on the mesh is dropped (program.single_device_puts_dropped: the latter put alone computes and
    places the same). Where no attempt traces, init_tp_state's whole output is made outside the
    trace: it is run eagerly (as the learner's code runs) and the program is its output put back
    where it lies (placed_constants), as for any array made outside the trace; the judge places
    those values itself and holds them to its own. Where the eager call fails too, the learner's
    own error of the last trace attempt propagates."""
    attempts = (lambda: traced(m, lambda p: placed_constants(sol.init_tp_state(m, tx, p)), host),
                # init_tp_state is given NumPy arrays on the host (the stub says so), and code may
                # treat them as such (np.asarray of them) where a traced input is not one: traced
                # then with the host arrays themselves, which the program holds as constants (the
                # judge's own values).
                lambda: traced(m, lambda: placed_constants(sol.init_tp_state(m, tx, dict(host)))))
    for skipping in (False, True):
        for i, attempt in enumerate(attempts):
            try:
                if not skipping:
                    closed, out = attempt()
                else:
                    with program.no_ops_traced(m), program.single_device_arrays_assembled(sol):
                        closed, out = attempt()
                # A put on one device only ever placed again on the mesh is the latter put alone.
                return program.single_device_puts_dropped(closed), out
            except Exception as exc:  # noqa: BLE001 (the last attempt's error propagates below)
                error = exc
    try:
        out = called(m, sol.init_tp_state, m, tx, dict(host))
        return traced(m, lambda: placed_constants(out))
    except Exception:  # noqa: BLE001 (the learner's error of the last trace attempt is said)
        raise error from None


@probe
def init_programs(sol, optimizer, shape, params, x, y):
    """init_tp_state(mesh, tx, params) traced on one mesh at float32 params of these shapes, and
    (x given) the learner's step traced at what it returns (the types, shardings included, of its
    params and optimizer state) and x, y placed by rows: the programs as data, and the path of every leaf
    of the optimizer state (labels for messages; the judge runs both programs and reads where
    their values land)."""
    m = mesh(shape)
    tx = make_tx(optimizer)
    host = {k: np.asarray(params[k], np.float32) for k in PARAM_SPECS}
    init, out = init_traced(sol, m, tx, host)
    if not isinstance(out, tuple) or len(out) != 2:
        fail(f"init_tp_state should return (placed_params, opt_state), got {type(out).__name__}.")
    placed, state = out
    if not isinstance(placed, dict) or set(placed) != set(PARAM_SPECS):
        fail(f"init_tp_state's params should be a dict with keys 'w1' and 'w2', got {type(placed).__name__}.")
    paths = lambda tree: [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]  # noqa: E731
    reply = {"init": _encoded(init, sol), "init_paths": paths(state)}
    # init_tp_state run as the learner's code runs (eagerly): where it puts the optimizer state.
    # A trace loses one placement that eager code makes (a value that leaves jax.jit through
    # out_shardings has an unsharded type in the trace, so tx.init jitted on it makes unsplit
    # moments there and split ones when called); the judge reads this report only for such a
    # moment, once its own run has placed the parameters right (checks.state_runs).
    placed, state = called(m, sol.init_tp_state, m, tx, dict(host))
    reply["reported"] = placement(placed, jax.tree.leaves(state), paths(state))
    if x is not None:
        # What the step makes of init_tp_state's output is read after init_tp_state's own placement
        # (on every mesh): a step that cannot take it is said then, not here.
        try:
            after, stepped = step_read(m, learner_step(sol, optimizer, shape),
                                       (placed, state, put(m, x, X_SPEC), put(m, y, X_SPEC)),
                                       step_maker(sol, lambda module: module.make_tp_train_step(m, tx)))
            check_step_output(stepped)
        except Exception as exc:  # noqa: BLE001 (the learner's error, or the step's wrong result)
            reply["step_error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        else:
            reply.update(step=_encoded(after, sol), step_paths=paths(stepped[1]))
    return reply
