"""Half the gap below w read off w's own power of two, without rounding w to bf16 first: right for
every w that is already a bf16 number, wrong where bf16 rounds w onto a power of two, and for
subnormals (where the spacing stops shrinking).

loses: rounding_threshold_rounds_w_to_bf16_first: w was not rounded to bfloat16 first
loses: rounding_threshold_below_the_smallest_normal: w was not rounded to bfloat16 first
"""
import math

from reference.ex4_master_weights import sgd_bf16, sgd_fp32_master, w_bf16, w_master  # noqa: F401  right as they are


def bf16_rounding_threshold(w):
    exponent = math.floor(math.log2(w))
    return 2.0 ** (exponent - 9) if w == 2.0 ** exponent else 2.0 ** (exponent - 8)
