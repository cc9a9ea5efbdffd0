"""Exercise 5: gradient checkpointing of a Flax Linen module with nn.checkpoint.

`nn.checkpoint` (the same function as `nn.remat`) is JAX's `jax.checkpoint` lifted to Flax
modules: it takes a Module *class* and returns a new class whose calls are rematerialised
during the backward pass. It changes no number, only what is stored for the gradient, so a
model that forgets it still returns the right output. The grader therefore also reads your
traced program, where a checkpoint shows up as the primitive `remat2`.

Write `nn_checkpoint_forward(seed, x, features)`:

  1. Define a compact Linen MLP (a class with a `features: int` field and an `@nn.compact`
     `__call__`): nn.Dense(features) -> nn.relu -> nn.Dense(features). Default initializers,
     default biases, no `name=` on the layers (Flax names them Dense_0 and Dense_1, and it
     derives each layer's initial values from its name), no ReLU after the last layer.
  2. Wrap the CLASS with nn.checkpoint, then instantiate the wrapped class with
     features=int(features). (nn.checkpoint(MLP(...)) -- an instance -- is an error.)
  3. Initialise with model.init(jax.random.PRNGKey(int(seed)), x) -- that key itself, not a
     key split from it.
  4. Apply the model to x and return the output flattened, shape (F,).

Inputs: x is a float32 JAX vector of shape (D,), D >= 1. seed (>= 0) and features (F >= 1)
are integer-valued but may arrive as Python floats such as 3.0: convert them with int().
Do not modify, donate or delete x; the caller still owns it.

What is checked (`make grade EX=ex5`):
  * the output equals the grader's own unwrapped MLP initialised with the same key, for
    several seeds, D and F, and also when seed and features arrive as floats;
  * the parameter tree is {'params': {'Dense_0': {kernel (D, F), bias (F,)},
    'Dense_1': {kernel (F, F), bias (F,)}}};
  * x is unchanged after the call;
  * checkpointing really does the work, read from your program while the grader's probes sit
    inside your model: once dead code is removed, a remat2 holds both Dense layers; shifting
    the model's output inside the checkpoint shifts what you return by the same, and all of
    the gradient with respect to x crosses the checkpointed layers (a checkpoint whose result
    is thrown away, multiplied by zero, masked out, averaged with a twin, put under
    stop_gradient or made with prevent_cse=False, which XLA merges with the forward pass,
    earns nothing);
  * it is Linen's lifted checkpoint, nn.checkpoint on the module class, not jax.checkpoint
    around model.apply or model.init (those lose the Linen checks even though their numbers
    and their remat2 are right);
  * the policy is the default, which saves nothing: what each remat2's policy saves is
    measured, and a policy that saves as much as everything_saveable (say, all but a constant)
    counts as no checkpoint at all.
  A solution with the right numbers and no working nn.checkpoint scores at most half.
Sizes and seeds are chosen by the grader; do not assume any particular D or F.
"""

import jax
import flax.linen as nn


def nn_checkpoint_forward(seed, x, features):
    """Output of the nn.checkpoint-wrapped MLP, initialised with PRNGKey(int(seed)) on x.

    Args:
      seed: integer-valued scalar (int or float), the PRNG seed.
      x: (D,) float32 JAX array; left unchanged.
      features: integer-valued scalar (int or float), the width F of both Dense layers.
    Returns:
      (F,) float32 JAX array: the model's output, flattened.
    """
    raise NotImplementedError
