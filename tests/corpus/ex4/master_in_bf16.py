"""The 'master' weight is kept in bf16 too.

loses: master_result_is_float32: has dtype bfloat16, expected float32
loses: master_matches_float32_simulation: the master weight is being rounded to bf16
"""
from reference.ex4_master_weights import bf16_rounding_threshold, sgd_bf16, w_bf16  # noqa: F401  right as they are

sgd_fp32_master = sgd_bf16
w_master = sgd_fp32_master(1.0, 1e-3, 1.0, 100)
