"""Exercise 1's wrong solutions, beyond the check each declares (tests/test_wrong_solutions.py):
what else they lose, and what they keep."""

EX = "ex1"


def test_padding_in_loss_also_breaks_the_gradient(corpus):
    lost = corpus(EX)["padding_in_loss"].lost(EX)
    assert "Padded positions contribute to your loss" in lost["gradient_matches_full_batch"]


def test_python_loop_keeps_the_numeric_points(corpus):
    # The numbers are right; only the technique checks may take points away.
    lost = corpus(EX)["python_loop"].lost(EX)
    assert set(lost) <= {"accumulates_with_lax_scan", "program_size_does_not_grow_with_n_micro"}
