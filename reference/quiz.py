"""Quiz, reference answers. The questions and options are in exercises/quiz.py; each answer is
proven on the installed libraries by tests/test_quiz_key.py; graders/exercises/quiz/key.json holds salted
hashes of these letters (and is left out of the students' copy that `make release` writes)."""

ANSWERS: dict[int, str | None] = {
    1: "D",  # 4 + 4 + 8 bytes per parameter: 16 GB
    2: "B",  # one checkpoint around the whole model keeps the peak
    3: "B",  # dots_saveable keeps dot_general outputs
    4: "B",  # nnx.Optimizer without wrt raises TypeError
    5: "C",  # the transpose of astype returns float32 gradients
    6: "B",  # one all-reduce after the row-split matmul
    7: "C",  # splitting layers between devices is pipeline parallelism
    8: "B",  # MultiSteps: zeros, zeros, zeros, one Adam step on the mean
    9: "C",  # jax.checkpoint takes the function alone
    10: "D",  # save_only_these_names matches checkpoint_name tags, so nothing is saved
    11: "D",  # jax.remat(policy=...) without the function raises TypeError
    12: "C",  # bf16 keeps fp32's exponent range, so small gradients do not underflow
    13: "D",  # a sharded contracting dim leaves the output sharding ambiguous: ShardingTypeError
    14: "B",  # AdamW's decay is decoupled; L2's goes through the moments and is divided by sqrt(v_hat)
    15: "C",  # parameters, BatchNorm statistics, optimizer state with its step, RNG state
}
