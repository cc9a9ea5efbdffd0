"""The chapter's own code (section 6.3) fitted to the stubs: its pack (parameters, BatchNorm
statistics, nnx.state(optimizer); no RNG), its StandardCheckpointer save and wait, and its restore
from an nnx.eval_shape template without shardings into a new real model and optimizer.

loses: dropout_stream_continues: the RNG was not saved
loses: checkpoint_is_an_orbax_folder_holding_the_whole_state: With no RNG state
loses: template_comes_from_eval_shape: ran for real
loses: restored_leaves_have_the_requested_shardings: on the mesh restore was given
loses: restore_reads_each_shard_straight_onto_its_device: which are not in the mesh restore was given
"""
import orbax.checkpoint as ocp
from flax import nnx


def pack(model, optimizer, rngs=None):
    """Training state to save: parameters, BN statistics, optimizer (including the step)."""
    return {"params": nnx.state(model, nnx.Param),
            "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer)}


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer))
    checkpointer.wait_until_finished()  # saving is asynchronous; wait for it to finish


def restore(path, make_state, mesh, shardings):
    checkpointer = ocp.StandardCheckpointer()
    # an "abstract" model (shapes only, no memory allocated), its state the restore template
    abs_net, abs_opt, _ = nnx.eval_shape(make_state)
    restored = checkpointer.restore(path, pack(abs_net, abs_opt))
    net_new, opt_new, rngs_new = make_state()  # arbitrary initialization
    nnx.update(net_new, restored["params"], restored["batch_stats"])  # write the restored state back
    nnx.update(opt_new, restored["optimizer"])
    return net_new, opt_new, rngs_new
