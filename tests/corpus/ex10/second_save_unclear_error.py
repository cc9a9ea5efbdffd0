"""Refuses a second save with a bare assert: an error, but one that says nothing of why.

loses: saving_twice_is_an_error_or_an_overwrite: does not say that a checkpoint is already there
"""
import os

import orbax.checkpoint as ocp

from reference.ex10_orbax_resume import pack, restore  # noqa: F401  (right as they are)


def save(path, model, optimizer, rngs):
    assert not os.path.isdir(path)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()
