"""Places the parameters by name but builds the state from the host arrays and then places each
of its leaves by shape: a (D, H) leaf like w1, an (H, D) leaf like w2. Right while D != H; where
D == H, w2's moments get w1's split.

loses: optimizer_state_carries_parameter_specs: not split like its parameter
"""
import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from reference.ex7_megatron_tp import (  # right as they are
    PARAM_SPECS, make_tp_mlp_shard_map, make_tp_train_step, tp_mlp,
)


def init_tp_state(mesh, tx, params):
    d, h = np.shape(params["w1"])

    def place(leaf):
        shape = np.shape(leaf)
        spec = P(None, "model") if shape == (d, h) else P("model", None) if shape == (h, d) else P()
        return jax.device_put(leaf, NamedSharding(mesh, spec))

    placed = {k: jax.device_put(v, NamedSharding(mesh, PARAM_SPECS[k])) for k, v in params.items()}
    return placed, jax.tree.map(place, tx.init(dict(params)))
