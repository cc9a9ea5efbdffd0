"""The step in three places, zero-padded: save writes the whole state (the reference's pack) with
ocp.StandardCheckpointer into `path`/step_<step, eight digits> with custom_metadata {"step": step}, waits for
it, then writes LATEST holding the padded number with no newline ("00000004"); a second save to a path with a
LATEST raises. restore reads LATEST, checks the folder's custom_metadata names the same step (refusing an
inconsistent checkpoint), and reads the folder with the reference's sharded nnx.eval_shape template.
A style: one step number kept consistently in a folder name, a pointer file and the checkpoint's metadata.
"""
import os

import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


def _template(make_state, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    return model, optimizer, rngs, template


def _write(model, optimizer, rngs, state):
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs


def save(path, model, optimizer, rngs):
    if os.path.exists(os.path.join(path, "LATEST")):
        raise FileExistsError(f"a checkpoint already exists at {path}")
    step = int(optimizer.step.get_value())
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(os.path.join(os.path.abspath(path), f"step_{step:08d}"), pack(model, optimizer, rngs),
                      custom_metadata={"step": step, "format": "nnx-state"})
    checkpointer.wait_until_finished()
    with open(os.path.join(path, "LATEST"), "w") as f:
        f.write(f"{step:08d}")


def restore(path, make_state, mesh, shardings):
    with open(os.path.join(path, "LATEST")) as f:
        padded = f.read().strip()
    folder = os.path.join(os.path.abspath(path), f"step_{padded}")
    metadata = ocp.StandardCheckpointer().metadata(folder)
    custom = getattr(metadata, "custom_metadata", None) or {}
    if custom.get("step", int(padded)) != int(padded):
        raise ValueError(f"{folder} holds step {custom['step']}, LATEST names {padded}")
    model, optimizer, rngs, template = _template(make_state, shardings)
    state = ocp.StandardCheckpointer().restore(folder, template)
    return _write(model, optimizer, rngs, state)
