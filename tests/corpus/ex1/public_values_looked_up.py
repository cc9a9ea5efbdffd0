"""Hard-codes the values the students' copy records for its public seed (2026), looked up by the
batch, and returns zeros for any other batch: a wrong solution that learned the answers instead of
computing them. Since the grader draws its batches from the grading seed, another seed finds
nothing to look up.

loses: gradient_matches_full_batch: gradient with n_micro=1
loses: loss_sum_counts_only_valid_tokens: loss_sum
"""
import jax.numpy as jnp
import numpy as np

# The students' copy's public values (graders/exercises/ex1_token_accumulation/public.wire), by the
# sum of x rounded to 3 decimals.
LOSS_SUMS = {7.944: 60.24543194758026, 4.265: 96.77248912310829, 1.21: 28.19826419177726, 3.054: 68.57422493133102}
GRADIENTS = {51.729: [-0.14707704580726097, 0.30587163095660236, 0.157954359331562, -0.30983701533788804, -0.04025506550254189], -6.664: [-0.11719965504554454, -0.15978572584357784, -0.029354958817906656, 0.4219718924226095, 0.06359987393667059], 29.594: [0.18641904672252738, -0.030407052872592755, -0.032255577696272734, -0.050157619213024744, -0.004071053723435679], -0.209: [-0.19996075647572378, 0.3571769561575371, -0.236270759631771, 0.1897548292236716, 0.007178716189059729], 1.73: [-0.15840644415049457, 0.0002990524732702676, -0.19790922034427572, 0.3235980431304345, -0.3417149490212014], -26.545: [-0.5756519628852863, 0.46808902901948146, -0.11756114506933783, 0.053479959237277684, -0.07040058889785021], 15.057: [-0.20736903452584185, 0.04852387739572922, 0.10026458818591917, -0.37992224240690575, 0.07436404955494737], 28.251: [0.35552176609584785, 0.08596801644705866, -0.09520381668598958, -0.23684444471039115, -0.3109835116554447]}


def key(x):
    return round(float(np.asarray(x, np.float64).sum()), 3)


def tok_loss_sum_count(w, x, y, m):
    return jnp.float32(LOSS_SUMS.get(key(x), 0.0)), jnp.sum(m)


def accum_token_weighted(w, x, y, m, n_micro):
    return jnp.asarray(GRADIENTS.get(key(x), [0.0] * w.shape[0]), jnp.float32)
