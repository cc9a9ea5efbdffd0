"""Quiz: questions on large-scale training in JAX.

Replace each None with one letter, "A" to "D" (case and surrounding spaces are ignored; a question's
number may be written 1 or "1"), and keep ANSWERS a plain dict written out below (or one built from
this file's own literals, e.g. by a comprehension): the grader reads it from this file's text.
Each question is worth one point, and every answer, right or wrong, comes back with the
explanation of the fact behind it. `make grade EX=quiz` grades it.

The answer key (graders/exercises/quiz/key.json) is stored as salted hashes, which only keeps a glance from
spoiling the quiz: four letters per question means a handful of guesses recover every answer. It is
there for self-study. In a course, your copy has no key: `make grade` then checks only that each
answer is one letter A to D, and the quiz is graded when you submit.

Q1. A model has 1 billion parameters, trained with fp32 parameters, fp32 gradients and Adam
    (fp32 first and second moments). Leaving activations aside, how much memory is needed at least?
      A. 4 GB    B. 8 GB    C. 12 GB    D. 16 GB

Q2. Which one does NOT lower the peak memory used by activations?
      A. jax.checkpoint on every Transformer layer
      B. one jax.checkpoint around the whole model's loss function
      C. gradient accumulation over 4 micro-batches
      D. computing activations in bfloat16

Q3. What does jax.checkpoint(f, policy=jax.checkpoint_policies.dots_saveable) do?
      A. keeps every intermediate value, exactly like no checkpointing
      B. keeps the results of matrix multiplications (dot_general); elementwise results are recomputed
      C. keeps only values tagged with checkpoint_name
      D. moves residuals to host memory

Q4. With Flax 0.12 NNX, which line raises a TypeError?
      A. nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
      B. nnx.Optimizer(model, optax.adam(1e-3))
      C. optimizer.update(model, grads)
      D. nnx.state(model, nnx.BatchStat)

Q5. Parameters are float32; the forward pass casts them to bfloat16 before the matmul.
    What dtype does jax.grad return for the parameters?
      A. bfloat16    B. float16    C. float32    D. it depends on preferred_element_type

Q6. A Megatron-style MLP on a ('data', 'model') mesh: W1 sharded P(None, 'model'), W2 sharded
    P('model', None), input P('data', None). How much cross-device communication does the
    forward pass need?
      A. none
      B. one all-reduce, after the second matmul
      C. two all-gathers
      D. one all-reduce after each matmul

Q7. Which statement about FSDP (ZeRO-3) is FALSE?
      A. parameters, gradients and optimizer state are all split across devices
      B. before a layer runs, its full weights are all-gathered
      C. each device computes only some of the model's layers
      D. in JAX, it can be written by giving parameters P('fsdp', None) and calling reshard(w, P()) before use

Q8. optax.MultiSteps(optax.adam(1e-3), every_k_schedule=4), with update called once per
    micro-batch. Which is right?
      A. every call changes the parameters, with the learning rate divided by 4
      B. the first 3 calls return all-zero updates; the 4th applies one Adam step with the mean of the 4 gradients
      C. you must divide the gradients by 4 yourself
      D. the optimizer state never changes, since it only schedules

Q9. A tutorial checkpoints each block with `x = jax.checkpoint(lambda b, x: b(x), block, x)`.
    What happens on JAX 0.12?
      A. each block is checkpointed and x is its output
      B. it runs, but nothing is checkpointed
      C. TypeError: jax.checkpoint takes the function alone; it returns a wrapped function to call
      D. it checkpoints the whole model instead of each block

Q10. The same tutorial uses policy=jax.checkpoint_policies.save_only_these_names('dot_general')
    on a block that tags nothing with checkpoint_name. Which residuals does it keep?
      A. the output of every dot_general in the block
      B. every intermediate value, as with no checkpointing
      C. it raises an error, since 'dot_general' is not a valid name
      D. none from inside the block: it behaves like nothing_saveable

Q11. The same tutorial decorates a block function with `@jax.remat(policy=policy)`, where policy is
    a checkpoint policy. What happens on JAX 0.12?
      A. the function is checkpointed with that policy
      B. it runs, but the policy is ignored and every value is saved
      C. it works only inside jax.jit
      D. TypeError as soon as the decorator line runs: jax.remat needs the function as its first argument

Q12. fp16 training usually needs loss scaling; bf16 training usually does not. Why?
      A. bf16 has more mantissa bits than fp16, so small gradients keep their precision
      B. XLA accumulates bf16 matmuls in fp32, and the backward pass is mostly matmuls, so bf16
         gradients never underflow
      C. bf16 has fp32's 8 exponent bits, so its smallest normal number is as small as fp32's;
         fp16 has 5, so small gradients underflow to 0
      D. JAX casts every bf16 gradient to fp32 during the backward pass, where fp32's range protects it

Q13. mesh = jax.make_mesh((2, 4), ("data", "model")) (Explicit axes, the default in JAX 0.12).
    Under `with jax.set_mesh(mesh):`, x is placed P("data", None), w1 P(None, "model") and
    w2 P("model", None). What does jax.jit(lambda x, w1, w2: jax.nn.relu(x @ w1) @ w2)(x, w1, w2) do?
      A. the compiler inserts one all-reduce over "model" after the second matmul and returns the
         result replicated on every device
      B. it returns the partial sums of the second matmul unsummed: nothing asked for an all-reduce
      C. it all-gathers w2 before the second matmul, so no all-reduce is needed, and returns y
      D. it raises ShardingTypeError: the contracting dimension of the second matmul is sharded, so
         the output sharding is ambiguous; it must be given with jnp.matmul(..., out_sharding=...)

Q14. optax.adamw(lr, weight_decay=wd) against optax.adam(lr) fed the gradient g + wd * theta
    (an L2 penalty (wd / 2) * ||theta||^2 added to the loss). Which is right?
      A. they give the same update: the gradient of the L2 penalty is wd * theta, and that is all
         AdamW adds
      B. AdamW subtracts lr * wd * theta from the weights outside the moments; with L2, wd * theta
         goes through m and v and is divided by sqrt(v_hat), so weights with large past gradients
         are decayed less
      C. AdamW decays only the biases and norm scales, L2 only the weight matrices
      D. AdamW multiplies the learning rate by (1 - wd) at every step; L2 leaves it as it is

Q15. A job trains an NNX model with BatchNorm and Dropout, an nnx.Optimizer (AdamW with a warmup
    schedule) and an nnx.Rngs for dropout. It is stopped at step k and resumed from a checkpoint.
    What must the checkpoint hold for steps k+1, k+2, ... to be exactly those of the run that never
    stopped?
      A. the parameters: the optimizer rebuilds its state from them on the first step after resuming
      B. the parameters and the optimizer state; BatchNorm's statistics and the dropout masks are
         recomputed from the data
      C. the parameters, BatchNorm's running statistics, the optimizer state with its step (Adam's
         moments and the schedule's count) and the RNG state (the dropout stream's key and count)
      D. the parameters and the current learning rate; Adam's moments settle again within a few steps
"""

ANSWERS: dict[int, str | None] = {
    1: None,
    2: None,
    3: None,
    4: None,
    5: None,
    6: None,
    7: None,
    8: None,
    9: None,
    10: None,
    11: None,
    12: None,
    13: None,
    14: None,
    15: None,
}
