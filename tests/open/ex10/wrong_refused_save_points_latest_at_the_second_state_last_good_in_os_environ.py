"""WRONG: tests/corpus/ex10/refused_save_points_latest_at_the_second_state (a second save writes the second
state to path/step-1, points path/LATEST at it, then raises FileExistsError) with the step folder of the
last successful save remembered in os.environ (one variable for every path) instead of a module dict:
restore reads that folder where it exists under the path, else the one path/LATEST names. A job restarted
after the refusal (a new process) reads the second state.

22/22 in both modes (with and without --sandbox) at seeds 20261130, 7 and 0; the original loses
saving_twice_is_an_error_or_an_overwrite (21/22). still_the_first's restarted reading (restored_afresh)
imports the learner's file afresh but runs in the process that saved, where the variable still names
step-0 (the third state is read there, as asked). The refusal-branch twin of
tests/open/ex10/wrong_second_state_beside_the_first_last_number_in_os_environ; catching either needs that
restore in a process that never saved.

Should lose saving_twice_is_an_error_or_an_overwrite: 21/22.
"""

import os

import jax
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}


_KEY = "TRAIN_LAST_GOOD_STEP"  # the step folder name this process's last successful save wrote


def save(path, model, optimizer, rngs):
    os.makedirs(path, exist_ok=True)
    n = len([name for name in os.listdir(path) if name.startswith("step-")])
    where = os.path.join(path, f"step-{n}")
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(where, pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()
    with open(os.path.join(path, "LATEST"), "w") as f:
        f.write(f"step-{n}")
    if n > 0:
        raise FileExistsError(f"a checkpoint already exists at {path}")
    os.environ[_KEY] = f"step-{n}"


def restore(path, make_state, mesh, shardings):
    model, optimizer, rngs = nnx.eval_shape(make_state)
    template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=shardings(leaf)),
                            pack(model, optimizer, rngs))
    where = os.path.join(path, os.environ.get(_KEY, "none"))
    if not os.path.isdir(where):
        with open(os.path.join(path, "LATEST")) as f:
            where = os.path.join(path, f.read().strip())
    state = ocp.StandardCheckpointer().restore(where, template)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
