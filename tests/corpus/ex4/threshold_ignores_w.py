"""The threshold is the value for w = 1.0 whatever w is.

loses: rounding_threshold_matches_bf16_spacing: the value for w = 1.0 every time
"""
from reference.ex4_master_weights import sgd_bf16, sgd_fp32_master, w_bf16, w_master  # noqa: F401  right as they are


def bf16_rounding_threshold(w):
    return 2.0 ** -9
