"""Plausible mistakes: Q2 per-layer checkpointing, Q5 bfloat16 gradients, Q10 a letter out of range,
Q11 the tutorial's decorator taken at its word, Q12 fp32 accumulation credited with bf16's range;
lower case and spaces around an otherwise right answer (Q1) are accepted.

loses: question_2: recomputing the entire forward pass
loses: question_5: transpose of astype
loses: question_10: expected one letter, "A" to "D"
loses: question_11: functools.partial(jax.remat, policy=policy)
loses: question_12: nor is accumulation
"""

ANSWERS = {1: " d ", 2: "A", 3: "B", 4: "B", 5: "A", 6: "B", 7: "C", 8: "B", 9: "C", 10: "E", 11: "A", 12: "B",
           13: "D", 14: "B", 15: "C"}
