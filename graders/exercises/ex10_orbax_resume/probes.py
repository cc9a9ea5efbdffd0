"""Probes for Exercise 10: the learner's save and restore, tried on the grader's own training.

The grader's model (BatchNorm, Dropout), its AdamW with a warmup schedule, its RNG stream and its
training step are defined here, because both sides run them: the worker trains with them around
the learner's `save` and `restore`, and the judge (graders/exercises/ex10_orbax_resume/checks.py) trains with
them straight through to get the expected numbers. The judge draws the configuration, the
starting state and the batches, and sends them; one probe, `experiment`, hands back what the
learner's code made of them, as plain data: k steps on mesh A and the learner's `save` (the
checkpoint folder's listing the moment `save` returned, then every byte of it once it stops
changing); for each target mesh, the learner's `restore`, run as a job restarted after the save runs it
(in a process forked before the learner's module was imported: before_solution; its temporary and home folders
empty, so that of what save wrote it sees only the checkpoint folder) (what `make_state` was asked for, every
piece of data JAX placed on a device while it ran, each restored leaf's value and placement) and
m more steps from what came back; then a second save to the same path, and what it did. A second
probe, `restore_from`, runs the learner's restore on a checkpoint folder the judge sends as bytes
(the learner's own checkpoint, written again by the judge with another state's numbers) at a path
the learner's save never wrote to, and again at the very path the experiment's save wrote (its folder
made again holding only those files) onto another target mesh. A third, `restore_afresh`, runs the
learner's restore, from its file imported afresh, on the folder a second save left, written again by the
judge, where that folder holds the second state other than in the first save's places.
A stage that raised is reported as data ({"outcome", "message"}, classified as the runner would),
so the checks that need only an earlier stage still judge it.
"""

import contextlib
import errno
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path, PurePosixPath

import jax
import jax.numpy as jnp
import numpy as np
import optax
import tensorstore
from flax import nnx
from jax._src import array as jax_array
from jax._src import core as jax_core
from jax._src import dispatch as jax_dispatch
from jax._src import pjit as jax_pjit
from jax._src import stages as jax_stages
from jax._src import xla_bridge
from jax._src.interpreters import pxla
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from orbax.checkpoint._src.serialization import type_handlers as ocp_type_handlers

from graders import settings
from graders.kit import hlo, verdicts, wire
from graders.kit.verdicts import fail
# What Sharding.is_equivalent_to compares, as one string: ex7's, which both sides of ex10 use too.
from graders.kit.placement import sharding_key
from graders.kit.probing import probe

AXES = ("data", "model")
# Mesh A, where the grader trains and the learner saves: all 8 devices.
MESH_A = {"shape": (2, 4), "axes": AXES, "devices": tuple(range(8))}
# While the learner's `save` runs, the interpreter switches threads this rarely (seconds): a save
# that returns while Orbax's background thread is still writing returns to a folder that thread
# has not finished, whatever the machine's load.
SAVE_SWITCH_INTERVAL = 5.0
# How long a save's folder must stay unchanged to count as written, and how long to wait for that.
SETTLE_SECONDS, SETTLE_LIMIT = 0.3, 30.0
# Orbax writes into a folder whose name holds this, and renames it when the write is finished: a
# folder that holds one is still being written, however long it has been quiet (a loaded machine
# can pause the background write for longer than SETTLE_SECONDS).
ORBAX_TMP = ".orbax-checkpoint-tmp"
MAX_FOLDER_BYTES = 64 << 20  # far above a checkpoint of the grader's small model
MAX_PIECES = 4000  # data placements recorded during one restore


# --- the grader's training, shared by both sides -----------------------------------------------

class Net(nnx.Module):
    """Linear -> BatchNorm -> relu -> Dropout -> Linear. The kernels carry where they go on a
    (data, model) mesh as metadata (nnx.with_partitioning, not applied when made), the same
    split as `spec_for` gives them."""

    def __init__(self, din, dh, dout, rate, momentum, *, rngs):
        init = nnx.initializers.lecun_normal()
        self.l1 = nnx.Linear(din, dh, kernel_init=nnx.with_partitioning(init, (None, "model"), eager_sharding=False),
                             rngs=rngs)
        self.bn = nnx.BatchNorm(dh, momentum=momentum, rngs=rngs)
        self.drop = nnx.Dropout(rate)
        self.l2 = nnx.Linear(dh, dout, kernel_init=nnx.with_partitioning(init, ("model", None), eager_sharding=False),
                             rngs=rngs)

    def __call__(self, x, rngs):
        return self.l2(self.drop(nnx.relu(self.bn(self.l1(x))), rngs=rngs))


_txs: dict = {}


def make_tx(config: dict):
    """AdamW with a warmup-cosine schedule; one object per configuration, so that every state
    built for it has the same graphdef and the training step is traced once per mesh."""
    key = repr(sorted(config.items()))
    if key not in _txs:
        _txs[key] = _make_tx(config)
    return _txs[key]


def _make_tx(config: dict):
    schedule = optax.warmup_cosine_decay_schedule(0.0, config["peak"], config["warmup"], config["decay_steps"],
                                                  config["end"])
    return optax.adamw(schedule, weight_decay=config["wd"])


def fresh_state(config: dict):
    """A new (model, optimizer, rngs), as a training job starts: initialised weights, an
    optimizer at step 0, the dropout stream at its first key. What `make_state` builds."""
    model = Net(config["din"], config["dh"], config["dout"], config["rate"], config["momentum"],
                rngs=nnx.Rngs(params=config["init_seed"]))
    optimizer = nnx.Optimizer(model, make_tx(config), wrt=nnx.Param)
    key = jax.random.wrap_key_data(jnp.asarray(np.asarray(config["key"], np.uint32)))
    return model, optimizer, nnx.Rngs(dropout=key)


def spec_for(config: dict, shape) -> P:
    """Where a leaf of the training state goes: the first kernel split by columns over "model",
    the second by rows, their Adam moments alike; everything else replicated."""
    shape = tuple(shape)
    if shape == (config["din"], config["dh"]):
        return P(None, "model")
    if shape == (config["dh"], config["dout"]):
        return P("model", None)
    return P()


_meshes: dict = {}


def mesh(desc: dict) -> jax.sharding.Mesh:
    """The mesh a description names: shape, axis names, device ids; Auto axes, so that the
    grader's model compiles on any of them without stating output shardings."""
    key = (tuple(desc["shape"]), tuple(desc["axes"]), tuple(desc["devices"]))
    if key not in _meshes:
        devices = np.array([jax.devices()[i] for i in key[2]]).reshape(key[0])
        _meshes[key] = jax.sharding.Mesh(devices, key[1], axis_types=(AxisType.Auto,) * len(key[1]))
    return _meshes[key]


def path_name(path) -> str:
    """A leaf's path in nnx.state((model, optimizer, rngs)) as one string, e.g.
    "0/l1/kernel/value" or "1/opt_state/0/mu/l1/kernel/value"."""
    parts = []
    for k in path:
        for attr in ("key", "name", "idx"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return "/".join(parts)


def is_key(leaf) -> bool:
    return jax.dtypes.issubdtype(getattr(leaf, "dtype", None), jax.dtypes.prng_key)


def host_value(leaf) -> np.ndarray:
    """A leaf's value on the host; a PRNG key as its key data (uint32)."""
    return np.asarray(jax.random.key_data(leaf) if is_key(leaf) else leaf)


def leaves_of(objects) -> list:
    """(path name, leaf) of every array of nnx.state(objects)."""
    return [(path_name(p), leaf) for p, leaf in jax.tree_util.tree_flatten_with_path(nnx.state(objects))[0]]


def values_of(objects) -> dict:
    return {name: host_value(leaf) for name, leaf in leaves_of(objects)}


def build(config: dict, values: dict, m) -> tuple:
    """(model, optimizer, rngs) holding `values` (path name -> host array; keys as key data),
    every leaf placed on mesh m where spec_for puts it."""
    graphdef, state = nnx.split(nnx.eval_shape(lambda: fresh_state(config)))
    paths, treedef = jax.tree_util.tree_flatten_with_path(state)
    placed = []
    for path, leaf in paths:
        value = np.asarray(values[path_name(path)])
        if is_key(leaf):
            value = jax.random.wrap_key_data(jnp.asarray(value, jnp.uint32))
        placed.append(jax.device_put(value, NamedSharding(m, spec_for(config, leaf.shape))))
    return nnx.merge(graphdef, jax.tree_util.tree_unflatten(treedef, placed))


_steps: dict = {}


def train_step(config: dict):
    """The grader's training step (one nnx.jit per configuration): the loss on (x, y), its
    gradient, an AdamW update, one dropout key drawn from rngs; every leaf of the state kept
    where spec_for puts it, so each step on a mesh compiles to one program."""
    key = repr(sorted(config.items()))
    if key not in _steps:
        @nnx.jit
        def step(model, optimizer, rngs, x, y):
            def loss_fn(model, rngs):
                return jnp.mean((model(x, rngs) - y) ** 2)

            loss, grads = nnx.value_and_grad(loss_fn)(model, rngs)
            optimizer.update(model, grads)
            objects = (model, optimizer, rngs)
            state = nnx.state(objects)
            nnx.update(objects, jax.tree.map(
                lambda a: jax.lax.with_sharding_constraint(a, spec_for(config, a.shape)), state))
            return loss

        _steps[key] = step
    return _steps[key]


def train(config: dict, objects, batches, m) -> list[float]:
    """One grader step per (x, y) batch on mesh m, the batch split over "data": the losses."""
    step = train_step(config)
    data = NamedSharding(m, P("data", None))
    losses = []
    with jax.set_mesh(m):
        for x, y in batches:
            losses.append(step(*objects, jax.device_put(np.asarray(x, np.float32), data),
                               jax.device_put(np.asarray(y, np.float32), data)))
    return [float(loss) for loss in losses]


# --- what the learner's code did, as data ---------------------------------------------------

def stage_error(sol, exc: BaseException) -> dict:
    """What the runner would say of an exception raised in the learner's code, as data."""
    solutions_dir = Path(getattr(sol, "__file__", ".")).resolve().parent
    timeout = settings.check_timeout()
    outcome, message = verdicts.classify(exc, sol, solutions_dir, timeout)
    if isinstance(exc, AttributeError) and "device_put_replicated" in str(exc):
        message = ("restore calls jax.device_put_replicated, which JAX 0.12 no longer has (AttributeError). "
                   "Hint: nothing needs replicating by hand: give every leaf of the template its NamedSharding "
                   "(jax.ShapeDtypeStruct(shape, dtype, sharding=shardings(leaf))) and Orbax puts each shard on its "
                   "device as it reads it.")
    return {"outcome": outcome, "message": message}


MAX_FILES = 4000  # files of a checkpoint folder sent either way: far above the grader's small model's
MAX_LINK = 1024  # characters of a symlink's target


def link_inside(folder: str, rel: str, target: str) -> bool:
    """Whether a symlink at rel (relative to folder) pointing at target stays inside folder: a
    relative target of bounded length that, read from the link's own folder, never leaves it."""
    if not isinstance(target, str) or not target or len(target) > MAX_LINK or "\0" in target:
        return False
    if PurePosixPath(target).is_absolute() or os.path.isabs(target):
        return False
    joined = os.path.normpath(os.path.join(os.path.dirname(rel), target))
    return joined != ".." and not joined.startswith("../") and not os.path.isabs(joined) and joined != "."


def travelling(folder: str, rel: str, target: str) -> str | None:
    """How a symlink at rel (relative to folder) pointing at target travels with the folder: a
    target inside the folder as a relative one (an absolute target inside it as the relative path
    it resolves to, e.g. `ln -s "$PWD/step_5" latest`), None for a link that leaves the folder."""
    if isinstance(target, str) and 0 < len(target) <= MAX_LINK and "\0" not in target and os.path.isabs(target):
        base = os.path.dirname(os.path.join(os.path.abspath(folder), *PurePosixPath(rel).parts))
        target = PurePosixPath(os.path.relpath(os.path.normpath(target), base)).as_posix()
    return target if link_inside(folder, rel, target) else None


def listing(folder: str) -> dict:
    """relative path -> size of every file under folder; a symlink that stays inside the folder
    (a checkpoint's "latest" pointer) -> its target (a str). Links are not followed."""
    found = {}
    for root, dirs, files in os.walk(folder):
        for name in (*dirs, *files):
            full = os.path.join(root, name)
            rel = PurePosixPath(os.path.relpath(full, folder)).as_posix()
            try:
                if os.path.islink(full):
                    target = travelling(folder, rel, os.readlink(full))
                    if target is not None:
                        found[rel] = target
                elif name in files:
                    found[rel] = os.stat(full).st_size
            except OSError:
                continue
    return found


def _still_writing(folder: str) -> bool:
    """Whether an Orbax write under folder has not been renamed into place yet."""
    return any(ORBAX_TMP in name for _, dirs, files in os.walk(folder) for name in (*dirs, *files))


def read_folder(folder: str, names) -> dict:
    """The files of folder named (relative path -> bytes; a symlink inside it -> its target, a
    str), bounded as a checkpoint of the grader's small model is."""
    files, total = {}, 0
    for rel in sorted(names):
        full = os.path.join(folder, *PurePosixPath(rel).parts)
        try:
            if os.path.islink(full):
                target = travelling(folder, rel, os.readlink(full))
                if target is not None:
                    files[rel] = target
                continue
            data = Path(full).read_bytes()
        except OSError:
            continue
        total += len(data)
        if total > MAX_FOLDER_BYTES or len(files) >= MAX_FILES:
            fail(f"save wrote more than {MAX_FOLDER_BYTES >> 20} MiB or {MAX_FILES} files for a model of a few "
                 "thousand numbers.")
        files[rel] = data
    return files


def settled(folder: str) -> dict:
    """The folder's files (relative path -> bytes, a symlink inside it -> its target) once its
    listing has stopped changing: a save that returned early keeps writing after it returned."""
    deadline = time.monotonic() + SETTLE_LIMIT
    last, since = listing(folder), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.02)
        now = listing(folder)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= SETTLE_SECONDS and not _still_writing(folder):
            break
    return read_folder(folder, last)


def unpack(files: dict, folder: str) -> None:
    """Write a checkpoint folder sent as data (relative path -> bytes; -> a str for a symlink) into
    folder: relative paths only, nothing outside it, links only to places inside it."""
    if not isinstance(files, dict) or len(files) > MAX_FILES or sum(
            len(d) for d in files.values() if isinstance(d, bytes)) > MAX_FOLDER_BYTES:
        fail("save wrote far more files or bytes than a checkpoint of the grader's small model holds.")
    links = []
    for rel, data in files.items():
        if not isinstance(rel, str) or not isinstance(data, (bytes, str)):
            continue
        parts = PurePosixPath(rel).parts
        if not parts or PurePosixPath(rel).is_absolute() or any(p in ("..", "", ".") for p in parts):
            continue
        target = os.path.join(folder, *parts)
        if isinstance(data, str):
            if link_inside(folder, PurePosixPath(rel).as_posix(), data):
                links.append((target, data))
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.islink(os.path.dirname(target)):
            continue
        with open(target, "wb") as f:
            f.write(data)
    made = []
    for target, data in links:  # after the files: no file is written through a link
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if not os.path.lexists(target):
                os.symlink(data, target)
                made.append(target)
        except OSError:
            continue
    inside = os.path.realpath(folder)
    for target in made:  # links through links can leave by ".." where the text alone stays inside
        if os.path.commonpath([inside, os.path.realpath(target)]) != inside:
            os.unlink(target)


def _backing(x):
    """The host array a piece of data is a view of (itself if it is not a view), None for a
    device array."""
    base = x
    while isinstance(getattr(base, "base", None), np.ndarray):
        base = base.base
    return base if isinstance(base, np.ndarray) else None


class Placements:
    """Every piece of data JAX places on a device while it is on (pxla.batched_device_put: a host
    array, or a slice of one, going to a device, and a device array moved to another): its
    shape, the shape and size of the host array it is a view of, whether it came from a device,
    and the device it went to; every array Orbax read whole onto the host, or copied whole
    from the devices onto it (device None); every block of a device array taken out to the host
    (shard.data, x.addressable_data(i), DLPack: "shard_read"); and (`moves`) the collectives of every
    program compiled, or compiled before and called, while it is on (a jitted reshard moves data
    between devices inside XLA)."""

    def __init__(self):
        self.pieces: list[dict] = []
        self.moves: list[dict] = []  # collectives of the programs run while restore runs
        self.original = None

    def __enter__(self):
        # Programs compiled before (at import, or by an earlier restore) would run now without being
        # compiled again, so without being read: every program restore runs is compiled while on.
        jax.clear_caches()
        self.original = pxla.batched_device_put
        original, pieces, moves = self.original, self.pieces, self.moves

        def recorded(aval, sharding, xs, devices, *args, **kwargs):
            for x, device in zip(xs, devices):
                if len(pieces) < MAX_PIECES:
                    base = _backing(x)
                    pieces.append({"shape": tuple(int(d) for d in np.shape(x)),
                                   "dtype": str(getattr(x, "dtype", "")),
                                   "backing": None if base is None else tuple(int(d) for d in base.shape),
                                   "backing_size": None if base is None else int(base.size),
                                   "from_device": isinstance(x, jax.Array),
                                   "device": int(device.id)})
            return original(aval, sharding, xs, devices, *args, **kwargs)

        pxla.batched_device_put = recorded
        # A device array put onto the same devices in another order is moved by JAX's own jitted
        # reshard, not through batched_device_put: each of its shards, from a device, counts too.
        self.original_reorder = jax_dispatch._different_device_order_reshard
        reorder = self.original_reorder

        def reordered(x, target, *args, **kwargs):
            for shard in getattr(x, "addressable_shards", ()):
                if len(pieces) < MAX_PIECES:
                    pieces.append({"shape": tuple(int(d) for d in shard.data.shape), "dtype": str(x.dtype),
                                   "backing": None, "backing_size": None, "from_device": True,
                                   "device": int(shard.device.id)})
            return reorder(x, target, *args, **kwargs)

        jax_dispatch._different_device_order_reshard = reordered
        # Orbax reading an array whole onto the host (a template leaf that is a NumPy array): each
        # array it hands back, as a piece on no device, the whole of itself.
        self.original_numpy = ocp_type_handlers.NumpyHandler.deserialize
        numpy_read = self.original_numpy

        async def read_whole(handler, *args, **kwargs):
            got = await numpy_read(handler, *args, **kwargs)
            for value in got:
                if len(pieces) < MAX_PIECES and hasattr(value, "shape"):
                    shape = tuple(int(d) for d in np.shape(value))
                    pieces.append({"shape": shape, "dtype": str(getattr(value, "dtype", "")), "backing": shape,
                                   "backing_size": int(np.prod(shape)), "from_device": False, "device": None})
            return got

        ocp_type_handlers.NumpyHandler.deserialize = read_whole
        # An array read onto the host with TensorStore by restore's own code (the library Orbax reads
        # with, opened at the checkpoint's files): each read, of its whole domain, as a piece on no
        # device ("tensorstore"). Orbax's own reads go through it too (a shard each, or a NumPy leaf
        # already recorded above): only a read called from outside Orbax counts.
        # (the class's own descriptors are kept to put back: TensorStore.read fetched from the class is
        # a function that no longer binds to an instance once set on it again)
        self.original_ts = tensorstore.TensorStore.__dict__["read"], tensorstore.TensorStore.__dict__["__array__"]
        ts_read, ts_array = tensorstore.TensorStore.read, tensorstore.TensorStore.__array__

        def read_by_tensorstore(store) -> None:
            caller = sys._getframe(2).f_globals.get("__name__", "")
            if len(pieces) < MAX_PIECES and not caller.startswith(("orbax", "tensorstore")):
                shape = tuple(int(d) for d in store.domain.shape)
                pieces.append({"shape": shape, "dtype": str(store.dtype.numpy_dtype), "backing": shape,
                               "backing_size": int(np.prod(shape)), "from_device": False, "device": None,
                               "tensorstore": True})

        def ts_read_recorded(store, *args, **kwargs):
            read_by_tensorstore(store)
            return ts_read(store, *args, **kwargs)

        def ts_array_recorded(store, *args, **kwargs):
            read_by_tensorstore(store)
            return ts_array(store, *args, **kwargs)

        tensorstore.TensorStore.read = ts_read_recorded
        tensorstore.TensorStore.__array__ = ts_array_recorded
        # A restored array copied whole from its devices onto the host (jax.device_get, np.asarray,
        # np.array: every such copy goes through ArrayImpl._value): as a piece on no device, the
        # whole of itself, fetched.
        self.original_value = jax_array.ArrayImpl._value
        fetch = self.original_value.fget

        def fetched(x):
            if len(pieces) < MAX_PIECES:
                shape = tuple(int(d) for d in x.shape)
                pieces.append({"shape": shape, "dtype": str(x.dtype), "backing": shape,
                               "backing_size": int(np.prod(shape)), "from_device": True, "device": None,
                               "fetched": True})
            return fetch(x)

        jax_array.ArrayImpl._value = property(fetched)
        # One device's shard of a restored array taken out (shard.data: NumPy copies a single-device
        # array through the buffer protocol, past ArrayImpl._value): as a piece on no device, read from
        # a shard ("shard_read").
        self.original_shard_data = jax_array.Shard.__dict__["data"]
        shard_data = getattr(self.original_shard_data, "func", getattr(self.original_shard_data, "fget", None))

        def taken_out(data):
            if len(pieces) < MAX_PIECES and hasattr(data, "shape"):
                pieces.append({"shape": tuple(int(d) for d in data.shape), "dtype": str(data.dtype), "backing": None,
                               "backing_size": None, "from_device": True, "device": None, "shard_read": True})
            return data

        def read_shard(shard):
            return taken_out(shard_data(shard))

        jax_array.Shard.data = property(read_shard)
        # A device array handed to another library without a copy JAX makes (np.from_dlpack): one
        # device's block taken out, as a shard.
        self.original_dlpack = jax_array.ArrayImpl.__dlpack__
        dlpack = self.original_dlpack

        def handed_out(x, *args, **kwargs):
            taken_out(x)
            return dlpack(x, *args, **kwargs)

        jax_array.ArrayImpl.__dlpack__ = handed_out
        self.original_addressable = jax_array.ArrayImpl.addressable_data
        addressable = self.original_addressable

        def one_block(x, index):  # x.addressable_data(i): one device's block, as shard.data
            return taken_out(addressable(x, index))

        jax_array.ArrayImpl.addressable_data = one_block
        # A program compiled to run while restore runs (a jit called, a reshard JAX compiles): the
        # collectives it holds move data between devices after Orbax placed it.
        self.original_compile = pxla.MeshComputation.compile
        compile_ = self.original_compile

        def collectives_of(executable) -> None:
            try:
                found = hlo.collective_shapes(executable.as_text())
            except Exception:  # an executable without text: nothing read
                found = []
            for op, dims in found:
                if len(moves) < MAX_PIECES:
                    moves.append({"op": str(op), "shape": tuple(int(d) for d in dims)})

        def compiled(lowering, *args, **kwargs):
            executable = compile_(lowering, *args, **kwargs)
            collectives_of(executable)
            return executable

        pxla.MeshComputation.compile = compiled
        # A program compiled before the record (jax.jit(f).lower(...).compile() kept from import) and
        # called while it is on: read once per object, as a program compiled meanwhile is.
        self.original_call = jax_stages.Compiled.__call__
        call, read = self.original_call, set()

        def called(compiled_, *args, **kwargs):
            if id(compiled_) not in read:
                read.add(id(compiled_))
                collectives_of(compiled_)
            return call(compiled_, *args, **kwargs)

        jax_stages.Compiled.__call__ = called
        return self

    def __exit__(self, *exc):
        pxla.MeshComputation.compile = self.original_compile
        jax_stages.Compiled.__call__ = self.original_call
        pxla.batched_device_put = self.original
        jax_dispatch._different_device_order_reshard = self.original_reorder
        ocp_type_handlers.NumpyHandler.deserialize = self.original_numpy
        tensorstore.TensorStore.read, tensorstore.TensorStore.__array__ = self.original_ts
        jax_array.ArrayImpl._value = self.original_value
        jax_array.Shard.data = self.original_shard_data
        jax_array.ArrayImpl.__dlpack__ = self.original_dlpack
        jax_array.ArrayImpl.addressable_data = self.original_addressable
        return False


# Every call of the `make_state` restore gets runs inside a named scope of its own: the equations
# it adds to a trace carry the scope in their name stacks, through nested jits and any rewriting
# of the program. A program JAX compiles (to run it: a jit called, or .lower().compile()) that
# holds such an equation runs make_state for real; one that is only traced or lowered
# (nnx.eval_shape, jax.eval_shape, jax.jit(f).eval_shape, .trace() or .lower(), jax.make_jaxpr) never is.
MAKE_STATE_SCOPE = "grader_make_state_"


def _scopes_in(jaxpr, found: set, depth: int = 0) -> None:
    """The numbers of make_state's calls (_CALLS) whose equations are in jaxpr (nested programs too)."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    if depth > 64 or not hasattr(jaxpr, "eqns"):
        return
    for eqn in jaxpr.eqns:
        stack = str(getattr(eqn.source_info, "name_stack", ""))
        for part in stack.split("/"):
            if part.startswith(MAKE_STATE_SCOPE) and part[len(MAKE_STATE_SCOPE):].isdigit():
                found.add(int(part[len(MAKE_STATE_SCOPE):]))
        for sub in jax_core.jaxprs_in_params(eqn.params):
            _scopes_in(sub, found, depth + 1)


# make_state's calls in this process, each at the number its named scope carries; the calls lists of
# the restores being recorded, innermost last; and the lowered programs that hold a call's equations
# (id of a lowering -> (the lowering, the calls' numbers)). Kept for the process, not per restore: a
# restore that compiles a program an earlier restore only lowered, or calls a make_state an earlier
# restore was given, does it in its own recording (its calls list gets the call).
_CALLS: list = []
_RECORDING: list = []
_LOWERED: dict = {}
# Calls made while no restore was recorded (a thread of an earlier restore's, after its report was
# sent): the next recorded restore reports them.
_BETWEEN: list = []


def _in_the_recordings(call: dict) -> None:
    if not _RECORDING:
        _BETWEEN.append(call)
    for calls in _RECORDING:
        if not any(c is call for c in calls):
            calls.append(call)


class Lowerings:
    """While on, every program JAX lowers is read for equations of make_state's calls, and each call
    whose equations reach a lowered program that is then compiled (a jit called, or
    .lower().compile()) is marked "compiled", and is one of `calls`. A program only lowered (.lower(),
    its out_info) allocates nothing: it is a shape evaluation too."""

    def __init__(self, calls: list):
        self.calls, self.original, self.original_compile = calls, None, None

    def __enter__(self):
        _RECORDING.append(self.calls)
        while _BETWEEN:
            _in_the_recordings(_BETWEEN.pop(0))
        if len(_RECORDING) > 1:  # the outermost recording has patched JAX already
            return self
        self.original = jax_pjit._resolve_and_lower
        self.original_compile = pxla.MeshComputation.compile
        original, original_compile = self.original, self.original_compile

        def lowered(args, jaxpr, *rest, **kwargs):
            found: set = set()
            if _CALLS:
                try:
                    _scopes_in(jaxpr, found)
                except Exception:  # a program the reading does not know: nothing marked
                    found = set()
            lowering = original(args, jaxpr, *rest, **kwargs)
            if found:
                _LOWERED[id(lowering)] = (lowering, found)
            return lowering

        def compiled(lowering, *args, **kwargs):
            kept = _LOWERED.get(id(lowering))
            if kept is not None and kept[0] is lowering:
                for number in kept[1]:
                    if 0 <= number < len(_CALLS):
                        _CALLS[number]["compiled"] = True
                        _in_the_recordings(_CALLS[number])
            return original_compile(lowering, *args, **kwargs)

        jax_pjit._resolve_and_lower = lowered
        pxla.MeshComputation.compile = compiled
        return self

    def __exit__(self, *exc):
        for i in range(len(_RECORDING) - 1, -1, -1):  # by identity: two empty lists are equal
            if _RECORDING[i] is self.calls:
                del _RECORDING[i]
                break
        if self.original is not None:
            jax_pjit._resolve_and_lower = self.original
            pxla.MeshComputation.compile = self.original_compile
        return False


def recorded_factory(config: dict, calls: list):
    """The `make_state` the learner's restore gets: fresh_state, noting for each call whether it
    made real arrays ("concrete"); under Lowerings, whether the program it was traced into was
    then compiled to run ("compiled"). A call made while another restore is recorded (this make_state
    kept since) is that restore's too."""
    def make_state():
        number = len(_CALLS)
        # Eager at the start means real arrays at the end (checked there): a report taken meanwhile (a
        # call a thread of the learner's makes while the grader reads a restore) says so already.
        call = {"concrete": isinstance(jax_core.trace_ctx.trace, jax_core.EvalTrace), "compiled": False,
                "number": number}
        _CALLS.append(call)
        calls.append(call)
        _in_the_recordings(call)
        with jax.named_scope(f"{MAKE_STATE_SCOPE}{number}"):
            made = fresh_state(config)
        kernel = made[0].l1.kernel.get_value()
        call["concrete"] = isinstance(kernel, jax.Array) and not isinstance(kernel, jax_core.Tracer)
        return made
    return make_state


def shardings_on(config: dict, m):
    """The `shardings` the learner's restore gets: leaf -> the NamedSharding it goes to on m."""
    def shardings(leaf):
        shape = getattr(leaf, "shape", None)
        if shape is None:
            raise TypeError(f"shardings(leaf) takes a leaf with a .shape (a jax.ShapeDtypeStruct, a jax.Array or an "
                            f"nnx.Variable), got {type(leaf).__name__}")
        return NamedSharding(m, spec_for(config, shape))
    return shardings


def describe(objects) -> dict:
    """Each leaf of nnx.state(objects): its value on the host (a key as its key data), shape,
    dtype, and placement (sharding_key, and a text for the learner)."""
    found = {}
    for name, leaf in leaves_of(objects):
        sharding = getattr(leaf, "sharding", None)
        ndim = len(getattr(leaf, "shape", ()))
        if sharding is None:
            shown = f"a {type(leaf).__name__}, on no device"
        elif isinstance(sharding, NamedSharding):
            shown = f"{sharding.spec} on devices {[int(d.id) for d in sharding.mesh.devices.flat]}"
        else:
            shown = f"{type(sharding).__name__} on devices {sorted(int(d.id) for d in sharding.device_set)}"
        try:
            value = host_value(leaf)
        except Exception:  # not an array (e.g. a ShapeDtypeStruct left in the state)
            value = None
        found[name] = {"value": value, "shape": tuple(int(d) for d in getattr(leaf, "shape", ())),
                       "dtype": str(getattr(leaf, "dtype", type(leaf).__name__)),
                       "key": sharding_key(sharding, ndim) if sharding is not None else None, "shown": shown}
    return found


def restored_objects(out):
    """What restore returned as (model, optimizer, rngs), or a failed check saying what it was."""
    if not isinstance(out, (tuple, list)) or len(out) != 3:
        fail(f"restore should return (model, optimizer, rngs), got {type(out).__name__}"
             f"{f' of length {len(out)}' if isinstance(out, (tuple, list)) else ''}.")
    model, optimizer, rngs = out
    for what, value, kind in (("model", model, nnx.Module), ("optimizer", optimizer, nnx.Optimizer),
                              ("rngs", rngs, nnx.Rngs)):
        if not isinstance(value, kind):
            fail(f"restore should return (model, optimizer, rngs) as NNX objects (the {what} an "
                 f"{kind.__name__}, as make_state builds it), got a {type(value).__name__} for the {what}. "
                 "Hint: write the restored state into the abstract objects from nnx.eval_shape(make_state) "
                 "(nnx.update), or nnx.merge their graphdef with it.")
    return tuple(out)


# --- probes ----------------------------------------------------------------------------------

_results: dict = {}
# The paths the experiment had the learner's save write to: the only ones restore_from writes the
# grader's checkpoint at again (each in a temporary folder of the experiment's, removed after it).
_SAVED_PATHS: set = set()


@probe
def experiment(sol, config, values, batches, k, targets, second):
    """The whole experiment, once per arguments (every check reads it):
      * train k steps on mesh A from `values`, and save with the learner's save: the folder's
        listing the moment save returned, then every byte once it stops changing;
      * for each target mesh in `targets`: restore with the learner's restore, as a job restarted
        after the save runs it (restarted_runs: what make_state was asked for, every piece of
        data placed on a device meanwhile, each restored leaf), then
        train on with the remaining batches (the losses and the final state);
      * save the state `second` (same step, other values) to the same path: what the learner's save
        raised, if anything; then what restore onto mesh A reads back (a refused save must have left the
        first checkpoint whole).
    A stage that raised is reported as data and ends what depends on it."""
    key = (sol, repr(sorted(config.items())), repr(targets), k,
           tuple((name, np.asarray(v).tobytes()) for name, v in sorted(values.items())),
           tuple((name, np.asarray(v).tobytes()) for name, v in sorted(second.items())),
           tuple(np.asarray(a).tobytes() for batch in batches for a in batch))
    if key not in _results:
        folder = tempfile.mkdtemp(prefix="ex10-")
        scratch = tempfile.mkdtemp(prefix="ex10-save-tmp-")
        try:
            _results[key] = _experiment(sol, config, values, batches, k, targets, second, folder, scratch)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
            shutil.rmtree(scratch, ignore_errors=True)
    return _results[key]


@contextlib.contextmanager
def temporary_folder(folder: str, home: bool = False):
    """While on, the temporary folder of this process is `folder` (tempfile.gettempdir() and TMPDIR,
    which processes started meanwhile inherit), and with `home` its home folder too (HOME, which
    os.path.expanduser reads); then the ones before."""
    names = ("TMPDIR", "HOME") if home else ("TMPDIR",)
    env, kept = {name: os.environ.get(name) for name in names}, tempfile.tempdir
    for name in names:
        os.environ[name] = folder
    tempfile.tempdir = folder
    try:
        yield folder
    finally:
        for name, value in env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        tempfile.tempdir = kept


def _experiment(sol, config, values, batches, k, targets, second, folder, scratch) -> dict:
    """`folder` holds the checkpoint; `scratch` is the temporary folder the learner's saves get (the
    machine that saved's), which the restarted job's restores never see: they get an empty one."""
    result = {"save": None, "at_return": None, "folder": None, "runs": [], "twice": None}
    _RETURNED.clear()
    m_a = mesh(MESH_A)
    objects = build(config, values, m_a)
    train(config, objects, batches[:k], m_a)
    path = os.path.join(folder, "checkpoint")
    _SAVED_PATHS.add(path)
    result["path"] = path
    try:
        before = sys.getswitchinterval()
        sys.setswitchinterval(SAVE_SWITCH_INTERVAL)
        try:
            started = time.time()
            with temporary_folder(scratch):
                sol.save(path, *objects)
            at_return = listing(folder)
        finally:
            sys.setswitchinterval(before)
    except Exception as exc:
        result["save"] = stage_error(sol, exc)
        return result
    result["at_return"] = at_return
    result["folder"] = settled(folder)
    result["runs"] = restarted_runs(sol, config, batches[k:], targets, path, since=started)
    with temporary_folder(scratch):  # the process that saved, on its machine
        result["twice"] = _saved_again(sol, config, second, path)
    return result


@contextlib.contextmanager
def restarted(sol):
    """The learner's file imported afresh, as a job restarted after the save has it: nothing the
    module kept since save (a copy of the state, a counter, a manager's memory) is there. While it
    is used it is the module of the learner's name in sys.modules, as in a restarted job, so that
    what looks a module up by name (dataclasses, pickle) finds it; then the first import is again."""
    module = verdicts.imported_afresh(sol)
    with verdicts.standing_in(module):
        yield module


# The processes the experiment's restores run in, one per target mesh (onto mesh A, onto the drawn
# target): forked (before_solution) before the learner's module was imported and before JAX made its
# devices, so none ever saved, as a job restarted after the save never did. Nothing the learner's
# code kept since save, in its module or anywhere else in the process (builtins, os.environ,
# another module's attributes), is there; nor what one restore left for the other. Each a job of its
# own, they also run at once. "jobs": [(pid, socket)] until they are used.
_RESTART: dict = {}
RESTARTED_JOBS = 2


def before_solution() -> None:
    """Run where the learner's code runs, after this module's import and before the learner's
    module's: fork the restarted jobs' processes. Not where JAX has made its devices already (a
    process forked then cannot use them): the restores then import the learner's file afresh in
    this process (restarted), which keeps out what its module kept, not what the process did."""
    if _RESTART or xla_bridge.backends_are_initialized():
        return
    jobs = []
    for _ in range(RESTARTED_JOBS):
        mine, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            mine.close()
            for _, other in jobs:
                other.close()
            try:
                _restarted_job(theirs)
            finally:
                os._exit(0)
        theirs.close()
        jobs.append((pid, mine))
    _RESTART["jobs"] = jobs


def _restarted_job(sock) -> None:
    """The forked process: one request (the learner's module and the experiment's restores), one reply."""
    try:
        request = wire.receive(sock)
    except (EOFError, OSError, wire.WireError):
        return  # the grading ended without asking
    name, folder = request["name"], Path(request["dir"])
    empty = tempfile.mkdtemp(prefix="ex10-restarted-tmp-")
    if isinstance(request.get("since"), float):
        hold_back_files_written_since(request["since"], spared=(os.path.dirname(request["path"]), empty, str(folder)))
    try:
        # Another machine's temporary and home folders, before the learner's file is imported: nothing
        # save wrote outside the checkpoint folder (a file in tempfile.gettempdir() or under ~) is in them.
        with temporary_folder(empty, home=True):
            runs = _restarted_runs_here(name, folder, request)
    finally:
        shutil.rmtree(empty, ignore_errors=True)
    wire.send(sock, {"runs": runs})


# A file that save wrote outside the checkpoint folder, in a folder any job on the machine reaches (a
# path written out in full: "/tmp/...", "~/..."), is not on the machine a restarted job runs on.
SHARED_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm")


def hold_back_files_written_since(since: float, spared=()) -> None:
    """In the restarted job's process only (the hook stays for the process's life): opening a file
    under the temporary folder, the home folder or SHARED_FOLDERS that was written since `since`
    (when save began) fails as a missing file does, unless it is under a `spared` folder (the
    experiment's, the learner's own), the compilation cache, or bytecode, or this process wrote it."""
    home = os.path.expanduser("~")
    roots = [os.path.realpath(r) for r in (tempfile.gettempdir(), *SHARED_FOLDERS, home)
             if r and os.path.realpath(r) != os.sep]
    kept = [os.path.realpath(f) for f in (*spared, os.environ.get("JAX_COMPILATION_CACHE_DIR")) if f]

    def under(full: str, folders) -> bool:
        return any(full == f or full.startswith(f.rstrip(os.sep) + os.sep) for f in folders)

    written: set = set()  # what this process wrote itself (a restore's own scratch file) it may read back

    def hook(event, args):
        if event == "os.rename" and len(args) > 1 and isinstance(args[1], (str, bytes, os.PathLike)):
            written.add(os.path.realpath(os.fsdecode(args[1])))
            return
        if event != "open" or not args or not isinstance(args[0], (str, bytes, os.PathLike)):
            return
        try:
            full = os.path.realpath(os.fsdecode(args[0]))
            mode, flags = (list(args) + [None, None])[1:3]
            if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                    isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)):
                written.add(full)
                return
            if (full in written or not under(full, roots) or under(full, kept) or "__pycache__" in full.split(os.sep)
                    or os.stat(full).st_mtime < since):
                return
        except (OSError, ValueError, TypeError):
            return
        raise FileNotFoundError(errno.ENOENT, "save wrote it outside the checkpoint folder; a job restarted on "
                                "another machine has no such file", os.fsdecode(args[0]))

    sys.addaudithook(hook)


def _restarted_runs_here(name: str, folder: Path, request: dict) -> list:
    try:
        sol = verdicts.load_module(name, folder)
    except BaseException as exc:  # noqa: BLE001 (the learner's import, which ran once already)
        error = as_restarted({"outcome": "failed", "message": verdicts.describe(exc, folder)}, True)
        return [dict(NO_RUN, restore=error) for _ in request["targets"]]
    return [_resumed(sol, request["config"], request["batches"], target, request["path"], fresh=None)
            for target in request["targets"]]


NO_RUN = {"restore": None, "calls": [], "pieces": [], "moves": [], "restored": None, "train": None, "losses": None,
          "final": None}


def restarted_runs(sol, config, batches, targets, path, since: float | None = None) -> list:
    """The experiment's restores onto each target and the grader's steps after each, as a job
    restarted after save runs them: each in a process before_solution forked (one per target, run
    at once), else from the learner's file imported afresh here (restarted); either way with empty
    temporary and home folders of their own (temporary_folder), as a job restarted on another
    machine has, and in a forked process no file written since `since` (when save began) outside
    the checkpoint folder in a folder the machine's jobs share (hold_back_files_written_since)."""
    jobs = _RESTART.pop("jobs", None)
    if not jobs or len(jobs) < len(targets):
        for pid, sock in jobs or ():
            sock.close()
            _end(pid)
        empty = tempfile.mkdtemp(prefix="ex10-restarted-tmp-")
        try:
            with temporary_folder(empty, home=True):
                return [_resumed(sol, config, batches, target, path) for target in targets]
        finally:
            shutil.rmtree(empty, ignore_errors=True)
    request = {"name": sol.__name__, "dir": str(Path(sol.__file__).resolve().parent), "config": config,
               "batches": batches, "path": path, "since": since}
    replies = [None] * len(targets)
    try:
        sent = []
        for (_, sock), target in zip(jobs, targets):
            try:
                wire.send(sock, dict(request, targets=[target]))
                sent.append(True)
            except (OSError, wire.WireError):
                sent.append(False)
        for i, ((_, sock), ok) in enumerate(zip(jobs, sent)):
            try:
                replies[i] = wire.receive(sock) if ok else None
            except (EOFError, OSError, wire.WireError):
                replies[i] = None
    finally:
        for pid, sock in jobs:
            sock.close()
            _end(pid)
    return [_one_run(reply) for reply in replies]


def _one_run(reply) -> dict:
    """A restarted job's one run from its reply, or the failure of a job that ended without one."""
    runs = reply.get("runs") if isinstance(reply, dict) else None
    if not (isinstance(runs, list) and len(runs) == 1 and isinstance(runs[0], dict)):
        error = as_restarted({"outcome": "failed", "message": (
            "the process restore ran in ended without a result (os._exit, a crash, or a reply too large).")}, True)
        return dict(NO_RUN, restore=error)
    return dict(NO_RUN, **runs[0])


def _end(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def as_restarted(error: dict, new_process: bool) -> dict:
    """A failed restore of the experiment's, said as what it was: a restarted job's."""
    if error["outcome"] == "not_attempted":
        return error
    # The fact, not a hint: the error may have another cause than something kept in memory.
    where = ("in a process that never saved, your file imported afresh, empty temporary and home folders: nothing your "
             "code kept since save is there, and of what save wrote only the checkpoint folder" if new_process else
             "your file imported afresh, empty temporary and home folders: nothing your module kept since save is "
             "there, and of what save wrote only the checkpoint folder")
    return dict(error, message=f"restore runs here as a job restarted after save runs it ({where}), and {error['message']}")


def _resumed(sol, config, batches, target, path, fresh=restarted) -> dict:
    """The learner's restore onto `target`, from the module fresh(sol) gives (a fresh import of the
    learner's file: restarted), or sol itself (fresh None: the process forked by before_solution
    imported it), then the grader's steps on what it returned."""
    run = dict(NO_RUN, calls=[], pieces=[], moves=[])
    m_t = mesh(target)
    try:
        with (contextlib.nullcontext(sol) if fresh is None else fresh(sol)) as job:
            with Placements() as placed, Lowerings(run["calls"]):
                out = job.restore(path, recorded_factory(config, run["calls"]), m_t, shardings_on(config, m_t))
            run["pieces"], run["moves"] = placed.pieces, placed.moves
            restored = restored_objects(out)
    except Exception as exc:
        run["restore"] = as_restarted(stage_error(sol, exc), fresh is None)
        return run
    run["restored"] = describe(restored)
    try:
        run["losses"] = train(config, restored, batches, m_t)
        run["final"] = values_of(restored)
    except Exception as exc:  # the grader's step on what restore returned
        text = " ".join(str(exc).split())[:400]
        run["train"] = {"outcome": "failed", "message": (
            f"the grader's training step could not run on what restore returned ({type(exc).__name__}: {text}). "
            "Hint: return the model, optimizer and rngs that make_state builds, holding the restored arrays "
            "placed where shardings says.")}
    return run


# What the learner's restores in the process that saved returned, kept alive so that a later restore
# handing back the very same objects can be told (restore_from).
_RETURNED: list = []


def _saved_again(sol, config, second, path) -> dict:
    """A second save to the path that holds a checkpoint: what it raised, if anything; then what
    restore onto mesh A reads there (the second state after an overwrite, still the first after a
    refusal: a refused save that changed the checkpoint left a mix); after an overwrite, also the
    folder's files, as the experiment's save's are sent."""
    twice = {"error": None, "restore": None, "restored": None, "folder": None, "calls": []}
    m_a = mesh(MESH_A)
    try:
        sol.save(path, *build(config, second, m_a))
    except Exception as exc:
        error = stage_error(sol, exc)
        twice["error"] = {"type": type(exc).__name__, "outcome": error["outcome"], "message": error["message"],
                          "text": " ".join(str(exc).split())[:300], "names_the_path": path in str(exc)}
        if error["outcome"] != "failed":  # out of time, or not written yet: nothing more to ask
            return twice
        # The folder as the refusal left it (at once, no waiting: a save refused before it wrote leaves
        # every byte as the first save wrote it, which is all the judge compares in the usual case).
        twice["folder"] = read_folder(os.path.dirname(path), listing(os.path.dirname(path)))
    else:  # what the path holds now, for the judge's own reading (not only what restore says)
        twice["folder"] = settled(os.path.dirname(path))
    try:
        with Lowerings(twice["calls"]):
            out = sol.restore(path, recorded_factory(config, twice["calls"]), m_a, shardings_on(config, m_a))
        out = restored_objects(out)
    except Exception as exc:
        twice["restore"] = stage_error(sol, exc)
        return twice
    _RETURNED.append(out)
    twice["restored"] = values_of(out)
    return twice


def _restored_from(sol, config, path, target) -> dict:
    """The learner's restore of the checkpoint at path onto the mesh `target`: each restored leaf
    described and every piece of data placed on a device meanwhile, or what restore raised."""
    m_t = mesh(target)
    calls: list = []
    try:
        with Placements() as placed, Lowerings(calls):
            out = sol.restore(path, recorded_factory(config, calls), m_t, shardings_on(config, m_t))
        out = restored_objects(out)
        again = any(a is b for earlier in _RETURNED for a in out for b in earlier)
        _RETURNED.append(out)
        return {"restore": None, "restored": describe(out), "pieces": placed.pieces, "moves": placed.moves,
                "returned_before": again, "calls": calls}
    except Exception as exc:
        return {"restore": stage_error(sol, exc), "restored": None, "pieces": [], "moves": [], "returned_before": False,
                "calls": calls}


@probe
def restore_afresh(sol, config, files):
    """The learner's restore, from its file imported afresh (restarted: nothing its module kept since save)
    with empty temporary and home folders, of a checkpoint folder the grader wrote (`files`, "checkpoint/..."),
    at a path its save never wrote, onto mesh A: as restore_from reports it."""
    folder, empty = tempfile.mkdtemp(prefix="ex10-afresh-"), tempfile.mkdtemp(prefix="ex10-restarted-tmp-")
    try:
        unpack(files, folder)
        with temporary_folder(empty, home=True):
            try:
                with restarted(sol) as job:
                    return _restored_from(job, config, os.path.join(folder, "checkpoint"), MESH_A)
            except Exception as exc:  # the learner's file, imported again, raised
                return {"restore": as_restarted(stage_error(sol, exc), False), "restored": None, "pieces": [],
                        "moves": [], "returned_before": False, "calls": []}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(empty, ignore_errors=True)


@probe
def restore_from(sol, config, files, saved=None, target=None, third=None):
    """The learner's restore from a checkpoint folder the grader wrote (`files`: relative path ->
    bytes, "checkpoint/..." as in the experiment's folder): onto mesh A at a path the learner's save
    never wrote to (in this process, which restored onto mesh A after the second save too); at that
    path again onto the mesh `third`, when given ("third"); and, when `saved` is the path the
    experiment's save wrote, at that very path (its folder made again, holding only these files)
    onto the mesh `target` ("at_saved"). For each, every restored leaf described and every piece of
    data placed on a device meanwhile, or what restore raised; "third" and "at_saved" are None when
    not asked for."""
    folder = tempfile.mkdtemp(prefix="ex10-given-")
    try:
        unpack(files, folder)
        answer = _restored_from(sol, config, os.path.join(folder, "checkpoint"), MESH_A)
        answer["third"] = (_restored_from(sol, config, os.path.join(folder, "checkpoint"), third)
                           if isinstance(third, dict) else None)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    answer["at_saved"] = None
    if isinstance(saved, str) and saved in _SAVED_PATHS and isinstance(target, dict):
        parent = os.path.dirname(saved)
        shutil.rmtree(parent, ignore_errors=True)  # the experiment's own folder, if still there
        try:
            os.makedirs(parent)
            unpack(files, parent)
            answer["at_saved"] = _restored_from(sol, config, saved, target)
        finally:
            shutil.rmtree(parent, ignore_errors=True)
    return answer
