"""Exercise 8's wrong solutions, beyond the check each declares (tests/test_wrong_solutions.py):
what else they lose, what they keep, and the grading policy: right numbers without the
technique score at most half."""

import numpy as np

from grading import declared
from graders import settings
from graders.exercises.ex8_loss_scaling import checks as g

EX = "ex8"

# The technique: the loop is one lax.scan in one jit, computing in fp16, deciding the skip from
# each step's own finite flag; the scale rule is data, so it runs under jit and in a scan; the
# gradients come from the fp16 model with the scale inside the differentiated function.
TECHNIQUE = {"train_is_one_scan_in_one_jit", "training_computes_in_fp16_inside_the_scan",
             "skip_is_decided_inside_the_scan_from_the_steps_finite_flag",
             "scale_step_runs_under_jit_and_inside_scan", "scaled_grads_compute_in_fp16",
             "grads_at_scale_1_underflow_as_fp16_does"}
# The loop's numbers count only when the loop is the technique, and the gradients' only when they
# are computed in fp16, where loss scaling matters (their checks say so).
LOOP_NUMBERS = {"training_matches_step_by_step_simulation",
                "skipped_steps_leave_params_and_adam_state_unchanged",
                "training_recovers_from_a_too_large_scale"}
GRAD_NUMBERS = {"grads_at_scale_2_15_keep_fp16s_precision", "grads_come_back_in_float32"}
# What the tests below read of the solutions they name, spelled out (tests/grading.py: graded_for).
FP16_GRADIENTS = {"grads_at_scale_1_underflow_as_fp16_does"} | GRAD_NUMBERS
SCALE_SEEN = {"scaled_grads_compute_in_fp16", "grads_at_scale_2_15_keep_fp16s_precision"}
GRADIENT_CHECKS = FP16_GRADIENTS | {"grads_at_scale_2_32_report_not_finite", "scaled_grads_compute_in_fp16"}
ONE_SCAN = {"train_is_one_scan_in_one_jit"}
UPDATE_FOLLOWED = ONE_SCAN | {"training_computes_in_fp16_inside_the_scan",
                              "skip_is_decided_inside_the_scan_from_the_steps_finite_flag"}


def test_technique_checks_are_declared_checks():
    assert TECHNIQUE | LOOP_NUMBERS | GRAD_NUMBERS <= set(declared(EX))


def test_python_loop_loses_its_numbers_only_for_want_of_the_scan(corpus):
    # At most half of the points in all (tests/test_wrong_solutions.py).
    for case in ("python_loop", "python_if"):
        lost = corpus(EX)[case].lost(EX)
        # Only technique checks are lost: every number is right ...
        assert set(lost) <= TECHNIQUE | LOOP_NUMBERS, (case, sorted(lost))
        # ... including the loop's, whose checks fail only for want of the scan.
        for check in LOOP_NUMBERS:
            assert "not produced by one lax.scan" in lost[check], (case, check, lost[check])


def test_fp32_model_loses_its_gradients_for_want_of_fp16(corpus):
    # No loss scaling where it matters: an fp32 model needs none, and it is not the exercise --
    # also when the fp16 model's gradients are added in times zero so that every dot is float16.
    for case in ("fp32_compute", "fp16_dots_as_decoy"):
        lost = corpus(EX)[case].lost(EX, among=FP16_GRADIENTS)
        assert "not computed in fp16" in lost["grads_at_scale_1_underflow_as_fp16_does"], case
        # Its gradients are right at 2^15 and float32: they fail only for want of fp16.
        for check in GRAD_NUMBERS:
            assert "not computed in fp16, where loss scaling matters" in lost[check], (case, check, lost[check])


def test_scale_cancelled_before_the_cast_is_caught_by_the_numbers_not_the_structure(corpus):
    # Its dots are fp16 and the scale even flows into the backward pass; only measuring the
    # underflow at 2^15 shows that fp16 never saw it.
    lost = corpus(EX)["scale_cancelled_before_cast"].lost(EX, among=SCALE_SEEN)
    assert "scaled_grads_compute_in_fp16" not in lost
    assert "never saw the scale" in lost["grads_at_scale_2_15_keep_fp16s_precision"]


def test_rule_mistakes_keep_the_gradient_points(corpus):
    for case in ("grow_every_step", "hardcoded_period", "counter_not_reset_on_overflow", "no_min_scale"):
        assert not corpus(EX)[case].lost(EX, among=GRADIENT_CHECKS), case


def test_skip_mistakes_are_named_in_the_training_checks(corpus):
    lost = corpus(EX)["update_on_overflow"].lost(EX)
    assert "updating on an overflow" in lost["skipped_steps_leave_params_and_adam_state_unchanged"]
    lost = corpus(EX)["state_changes_on_skip"].lost(EX)
    assert set(lost) == {"training_matches_step_by_step_simulation",
                         "skipped_steps_leave_params_and_adam_state_unchanged"}, sorted(lost)


def test_readme_states_what_the_chapters_cells_score_and_the_pinned_optax(corpus):
    # README's "Differences from the chapter" (tests/test_differences_from_the_chapter.py reads it).
    from importlib import metadata

    from test_differences_from_the_chapter import _paragraph

    ex = corpus(EX)["chapter_interface_only"].exercise(EX)
    paragraph = _paragraph(EX)
    assert f"A module with only the chapter's interface (its cells as they are) scores {ex['score']}/{ex['max_score']} here" in paragraph, paragraph
    assert f"pins Optax {metadata.version('optax')}" in paragraph


def test_unrolled_loops_are_named_before_anything_is_compiled(corpus):
    # unroll=True once took 165 s to compile at 64 steps, a Python loop in a jit 3-4 minutes to grade
    # (ending in an AssertionError with no hint): both are now named from programs of a few steps.
    for case, words in (("scan_unrolled", "its lax.scan unrolls every step"), ("python_loop_in_jit", "unrolled in Python")):
        run = corpus(EX)[case]
        lost = run.lost(EX, among=ONE_SCAN)
        assert words in lost["train_is_one_scan_in_one_jit"] and "was not run" in lost["train_is_one_scan_in_one_jit"]
        assert run.results["execution_time"] < 100, (case, run.results["execution_time"])


def test_updates_that_do_not_follow_the_scaled_gradient_lose_technique_points(corpus):
    # The update is followed from the step's own scaled fp16 gradients and finite flag, by running one
    # step of the loop on its own: a loop that is one jitted scan of fp16 dots is not enough.
    for case, check in (("update_with_unscaled_grads", "training_computes_in_fp16_inside_the_scan"),
                        ("update_with_fp32_grads", "training_computes_in_fp16_inside_the_scan"),
                        ("update_not_selected", "skip_is_decided_inside_the_scan_from_the_steps_finite_flag"),
                        ("moments_not_selected", "skip_is_decided_inside_the_scan_from_the_steps_finite_flag"),
                        ("finite_from_one_leaf_in_loop", "skip_is_decided_inside_the_scan_from_the_steps_finite_flag"),
                        ("previous_steps_flag", "skip_is_decided_inside_the_scan_from_the_steps_finite_flag")):
        lost = corpus(EX)[case].lost(EX, among=UPDATE_FOLLOWED)
        assert check in lost, (case, sorted(lost))
        assert "train_is_one_scan_in_one_jit" not in lost, case  # the loop itself is right


def test_every_underflow_data_set_keeps_its_margins():
    # The scaled_grads checks draw their data set from these; each must underflow clearly at
    # scale 1, lose nothing at 2^15, and overflow already at 2^31 (so 2^32 with room to spare).
    for data_seed in g.UNDERFLOW_SETS:
        p, x, y = g.problem(data_seed)
        true = g.flat(g.grads_np(p, x, y))
        assert g.zero_share(g.own_fp16_grads(data_seed, 1.0), true) >= g.UNDERFLOW_SHARE, data_seed
        assert g.zero_share(g.own_fp16_grads(data_seed, 2.0 ** 15), true) == 0, data_seed
        assert not np.all(np.isfinite(g.own_fp16_grads(data_seed, 2.0 ** 31))), data_seed


def test_the_data_sets_follow_the_grading_seed(monkeypatch):
    drawn = set()
    for seed in range(40):
        monkeypatch.setenv(settings.SEED, str(seed))
        first, second = g.grad_seeds()
        assert first in g.UNDERFLOW_SETS and second in g.PRECISION_SETS and first != second
        drawn.add(first)
    assert len(drawn) > 10
