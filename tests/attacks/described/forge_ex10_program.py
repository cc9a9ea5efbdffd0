"""Exercise 10: a real Orbax checkpoint of another state. At import the module replaces the one
ex10 probe, experiment, with one that runs the module's own save and restore (NumPy files, host
arrays placed with jax.device_put: right numbers, no Orbax) and sends, as the folder save wrote, a
genuine Orbax checkpoint (ocp.StandardCheckpointer, complete before "save returned") holding the
whole training state with every part in place, but the state the grader started from, not the
one after its k steps; and for restore, a description of Orbax reading one shard of each split
leaf onto each device of the target mesh, from make_state called under nnx.eval_shape. Every
mark of the technique, computing something else: the grader reads the checkpoint's values."""


def _pr(sol):
    return sol._sys.modules["graders.exercises." + sol._MODULE + ".probes"]


def _perfect_pieces(sol, config, target):
    import numpy as np
    from flax import nnx
    from jax.sharding import NamedSharding
    pr = sol._pr(sol)
    m = pr.mesh(target)
    pieces = []
    for _, leaf in pr.leaves_of(nnx.eval_shape(lambda: pr.fresh_state(config))):
        spec = pr.spec_for(config, leaf.shape)
        if not len(spec):
            continue
        shard = tuple(int(d) for d in NamedSharding(m, spec).shard_shape(tuple(leaf.shape)))
        for device in target["devices"]:
            pieces.append({"shape": shard, "dtype": str(leaf.dtype), "backing": shard,
                           "backing_size": int(np.prod(shard)), "from_device": False, "device": int(device)})
    return pieces


def _orbax_folder_of(sol, config, values):
    """The bytes of a real Orbax checkpoint of the state `values` (the grader's starting state)."""
    import os
    import shutil
    import tempfile

    import orbax.checkpoint as ocp
    from flax import nnx
    pr = sol._pr(sol)
    model, optimizer, rngs = pr.build(config, values, pr.mesh(pr.MESH_A))
    state = {"params": nnx.state(model, nnx.Param), "batch_stats": nnx.state(model, nnx.BatchStat),
             "optimizer": nnx.state(optimizer), "rngs": nnx.state(rngs)}
    folder = tempfile.mkdtemp(prefix="ex10-forge-")
    try:
        checkpointer = ocp.StandardCheckpointer()
        checkpointer.save(os.path.join(folder, "checkpoint"), state)
        checkpointer.wait_until_finished()
        files = {}
        for root, _, names in os.walk(folder):
            for name in names:
                full = os.path.join(root, name)
                with open(full, "rb") as f:
                    files[os.path.relpath(full, folder)] = f.read()
        return files
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _forged_experiment(config, values, batches, k, targets, second):
    import shutil
    import tempfile
    sol = _sys.modules[_MODULE]
    pr = sol._pr(sol)
    folder, scratch = tempfile.mkdtemp(prefix="ex10-"), tempfile.mkdtemp(prefix="ex10-save-tmp-")
    try:
        result = pr._experiment(sol, config, values, batches, k, targets, second, folder, scratch)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
    files = sol._orbax_folder_of(sol, config, values)
    result["folder"] = files
    result["at_return"] = {rel: len(data) for rel, data in files.items()}
    for run, target in zip(result["runs"], targets):
        run["calls"] = [{"eval_shape": True, "concrete": False}]
        run["pieces"] = sol._perfect_pieces(sol, config, target)
    return result


def _experiment(sol, config, values, batches, k, targets, second):
    return sol._forged_experiment(config, values, batches, k, targets, second)


_install("experiment", _experiment)
