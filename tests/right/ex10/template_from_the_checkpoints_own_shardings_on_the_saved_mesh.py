"""Restore reads the checkpoint's metadata first: where every leaf's recorded sharding is equivalent to the
one shardings(leaf) asks for (restoring onto the very mesh the state was saved from), the template's
shardings are the checkpoint's own (to_jax_sharding(), P() for scalars); otherwise (another mesh, or a
checkpoint that records no sharding) shardings(leaf). Either way each template leaf is a sharded
jax.ShapeDtypeStruct of the abstract state's shape and dtype.
"""

import jax
import orbax.checkpoint as ocp
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def pack(model, optimizer, rngs):
    return {"params": nnx.state(model, nnx.Param),
            "batch_stats": nnx.state(model, nnx.BatchStat),
            "optimizer": nnx.state(optimizer),
            "rngs": nnx.state(rngs)}


def save(path, model, optimizer, rngs):
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, pack(model, optimizer, rngs))
    checkpointer.wait_until_finished()


def _name(path):
    """A leaf's path as a tuple of strings, without a trailing "value" (the metadata's and nnx's differ there)."""
    parts = tuple(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path)
    return parts[:-1] if parts and parts[-1] == "value" else parts


def saved_shardings(checkpointer, path, abstract, shardings):
    """The checkpoint's own shardings, leaf by leaf, if each is equivalent to shardings(leaf); else None."""
    metadata = checkpointer.metadata(path)
    tree = getattr(metadata, "item_metadata", metadata)
    tree = getattr(tree, "tree", tree)
    recorded = {_name(p): meta for p, meta in jax.tree_util.tree_flatten_with_path(tree)[0]}
    leaves, treedef = jax.tree_util.tree_flatten_with_path(abstract)
    found = []
    for p, leaf in leaves:
        recorded_sharding = getattr(recorded.get(_name(p)), "sharding", None)
        if recorded_sharding is None:
            return None
        sharding = recorded_sharding.to_jax_sharding()
        if not sharding.is_equivalent_to(shardings(leaf), len(leaf.shape)):
            return None
        if not leaf.shape:  # Orbax records P(None,) for a scalar, which a scalar's template refuses
            sharding = NamedSharding(sharding.mesh, P())
        found.append(sharding)
    return jax.tree.unflatten(treedef, found)


def restore(path, make_state, mesh, shardings):
    checkpointer = ocp.StandardCheckpointer()
    model, optimizer, rngs = nnx.eval_shape(make_state)
    abstract = pack(model, optimizer, rngs)
    own = saved_shardings(checkpointer, path, abstract, shardings)
    if own is None:
        own = jax.tree.map(shardings, abstract)
    template = jax.tree.map(lambda leaf, where: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=where),
                            abstract, own)
    state = checkpointer.restore(path, template)
    nnx.update(model, state["params"], state["batch_stats"])
    nnx.update(optimizer, state["optimizer"])
    nnx.update(rngs, state["rngs"])
    return model, optimizer, rngs
