"""Exercise 5's wrong solutions, beyond the check each declares (tests/test_wrong_solutions.py):
what else they lose, and what they keep."""

import re

import numpy as np
import pytest

from grading import ROOT, declared, grade, grader_module, technique_free_params
from graders import settings

EX = "ex5"
# The checks that read the program rather than the numbers; the rest are the numbers checks.
TECHNIQUE = {"forward_holds_remat2", "checkpoint_policy_saves_nothing",
             "output_and_gradient_go_through_nn_checkpoint", "nn_checkpoint_wraps_whole_mlp"}


def test_technique_checks_are_the_ones_named_here():
    assert TECHNIQUE < set(declared(EX))


@pytest.mark.parametrize("case", technique_free_params(EX))
def test_right_numbers_without_nn_checkpoint_lose_only_technique_checks(corpus, case):
    # Only the program is wrong: every numbers check keeps its points (and the whole at most
    # half of them: tests/test_wrong_solutions.py).
    # A case may also declare a structure check it loses (parameters of nn.checkpoint(MLP) used by
    # hand: no module is applied, so the applied parameter tree is lost too).
    declares = set(re.findall(r"^loses: (\w+):", (ROOT / "tests" / "corpus" / EX / f"{case}.py").read_text(), re.M))
    lost = corpus(EX)[case].lost(EX)
    assert lost and set(lost) <= TECHNIQUE | declares, sorted(lost)


@pytest.mark.parametrize("case", ["jax_checkpoint_apply", "jax_checkpoint_init_and_apply",
                                  "jax_checkpoint_init_with_output"])
def test_checkpointed_functions_lose_every_linen_check(corpus, case):
    # Each holds remat2 around the whole MLP, in apply (and init): only Linen's lift is missing.
    lost = corpus(EX)[case].lost(EX)
    assert set(lost) == {"output_and_gradient_go_through_nn_checkpoint", "nn_checkpoint_wraps_whole_mlp"}, lost
    assert all("not inside Linen's nn.checkpoint" in message for message in lost.values())


def test_dots_saveable_loses_only_the_policy_check(corpus):
    # It recomputes the ReLU and keeps the products: a real checkpoint, with another policy.
    lost = corpus(EX)["policy_dots_saveable"].lost(EX)
    assert set(lost) == {"checkpoint_policy_saves_nothing"}, lost


def test_checkpointing_the_second_half_keeps_the_output_check(corpus):
    # The output layer is inside nn.checkpoint and the gradient crosses it: only "whole" is wrong.
    lost = corpus(EX)["checkpoint_second_half"].lost(EX)
    assert "nn_checkpoint_wraps_whole_mlp" in lost
    assert not lost.keys() & {"forward_holds_remat2", "output_and_gradient_go_through_nn_checkpoint",
                              "checkpoint_policy_saves_nothing"}


def test_explicit_names_also_change_the_seeded_values(corpus):
    lost = corpus(EX)["explicit_names"].lost(EX)
    assert "output_matches_unwrapped_mlp" in lost
    assert "which Flax folds into each layer's key" in lost["output_matches_unwrapped_mlp"]


def test_no_bias_keeps_the_numbers(corpus):
    # Dense biases start at zero, so only the parameter tree can tell a missing bias.
    lost = corpus(EX)["no_bias"].lost(EX)
    assert set(lost) == {"parameter_tree_is_dense_0_dense_1"}, lost


@pytest.mark.parametrize("case", ["split_key", "ignores_seed", "relu_on_output"])
def test_wrong_numbers_keep_the_technique_points(corpus, case):
    # The technique checks compare the learner's program with itself, not with the grader's
    # numbers: a wrong init key or an extra ReLU costs the numbers checks only.
    assert not set(corpus(EX)[case].lost(EX)) & TECHNIQUE


def test_no_call_of_the_learners_code_runs_in_the_main_thread(tmp_path):
    """The output calls overlap in threads (probe `start`); every other call runs in the same
    threads, so a module cannot tell the output checks' calls from the technique checks' by the
    thread it runs in (and, say, return unwrapped numbers to one and a checkpoint to the other)."""
    from grading import ROOT, grade

    module = (ROOT / "reference" / "ex5_linen_checkpoint.py").read_text() + (
        "\n\nimport threading as _threading\n_inner = nn_checkpoint_forward\n\n\n"
        "def nn_checkpoint_forward(seed, x, features):\n"
        "    if _threading.current_thread() is _threading.main_thread():\n"
        "        raise RuntimeError('called in the main thread')\n"
        "    return _inner(seed, x, features)\n")
    (tmp_path / "ex5_linen_checkpoint.py").write_text(module)
    run = grade(tmp_path, ["ex5"])
    assert run.exercise("ex5")["status"] == "passed", run.lost("ex5")


def test_no_seed_draws_a_probe_input_that_turns_off_every_hidden_unit(monkeypatch):
    # The probed program's x is drawn from the grading seed. Where the first layer's ReLU turns
    # every unit off at that x, the gradient with respect to x is 0 for every solution, and no
    # cotangent tap can show that it crosses the checkpoint: at the old probe (seed 6, D = 3, F = 5)
    # the reference lost 9 points there (CI, a seed drawn at random), and the grader probes again
    # with -x. The probe is now the first numbers call (checks.INT_CASES[0]: seed 3, D = 4, F = 6),
    # where none of the first 1000 seeds draws such an x (the -x fallback stays, unreached).
    import jax

    checks = grader_module(EX)
    first = checks.plain_params(jax.random.PRNGKey(checks.PROBE_SEED), checks.PROBE_D, checks.PROBE_F)["Dense_0"]

    def all_off(seed):
        monkeypatch.setenv(settings.SEED, str(seed))
        x = checks.make_x(checks.PROBE_SEED, checks.PROBE_D).astype(np.float64)
        return not (x @ first["kernel"] + first["bias"] > 0).any()

    assert not [s for s in range(1000) if all_off(s)]
