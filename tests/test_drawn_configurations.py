"""Graders that draw a configuration from the grading seed give the reference full marks
whatever the seed: the maintainer tests' own seed is one draw among many."""

from grading import ROOT, TEST_SEED, depths, drawing_exercises, far_draw_seed, grade

# The graders that draw a depth: ex2's L (of its memory curve, and of its best_group_size pair) and
# ex6's number of layers (ex7 draws its sizes for each of its four meshes from the seed; each draw
# holds its edges, D == H, powers of two and not: see its configs).
DRAWING = drawing_exercises()

# A draw of ex2's deepest network on inputs where a right float32 gradient is further from
# float64 than numeric.RTOL allows (the reference once scored 18/20 there).
FLOAT32_LIMIT_DRAW = 414230


def test_some_graders_draw_their_configuration():
    assert {"ex2", "ex6", "ex7"} <= set(DRAWING), DRAWING


def test_the_far_draw_draws_other_depths_than_the_tests_seed():
    assert all(a != b for a, b in zip(depths(far_draw_seed()), depths(TEST_SEED))), \
        (depths(far_draw_seed()), depths(TEST_SEED))


def test_reference_gets_full_marks_on_other_draws(cold_far_draw):
    # Graded at the far draw with an empty cache (conftest.py), which
    # tests/test_compilation_cache.py grades again warm.
    run, _, seed = cold_far_draw
    for ex_id in DRAWING:
        assert run.exercise(ex_id)["status"] == "passed", (seed, ex_id, run.lost(ex_id))


def test_reference_gets_full_marks_where_float32_needs_the_widened_tolerance():
    run = grade(ROOT / "reference", ["ex2"], "--seed", str(FLOAT32_LIMIT_DRAW))
    assert run.exercise("ex2")["status"] == "passed", run.lost("ex2")
