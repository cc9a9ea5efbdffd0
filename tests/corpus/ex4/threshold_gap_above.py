"""Half the spacing *above* w (eps times w's power of two), which is twice too big at powers of two.

loses: rounding_threshold_matches_bf16_spacing: half the gap *above* w
"""
import math

import jax.numpy as jnp
import numpy as np

from reference.ex4_master_weights import sgd_bf16, sgd_fp32_master, w_bf16, w_master  # noqa: F401  right as they are


def bf16_rounding_threshold(w):
    exponent = math.floor(math.log2(float(np.asarray(w, jnp.bfloat16))))
    return 2.0 ** (exponent - 7) / 2
