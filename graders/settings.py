"""The environment variables the graders read, each named and read here, once.

The runner writes the grading child's settings into its environment (graders/runner/launch.py,
child_env); the child and the kit read them back through the functions below. The learner's
own variables pass through untouched.
"""

import os

CHECK_TIMEOUT = "GRADERS_CHECK_TIMEOUT"  # seconds per check (pytest-timeout), in the grading child
SEED = "GRADERS_SEED"  # the seed the checks draw their configurations from
RESULT_FD = "GRADERS_RESULT_FD"  # the pipe a spawned grading child writes its events to
EXPECTED_DIR = "GRADERS_EXPECTED_DIR"  # where the graders' own figures are kept (kit/own_figures.py)
NO_FORK = "GRADERS_NO_FORK"  # start each grading child as a new interpreter, not from a fork server
NO_RESIDENT = "GRADERS_NO_RESIDENT"  # keep no fork server between runs (make grade KEEP_SERVER=0)
RESIDENT_IDLE = "GRADERS_RESIDENT_IDLE"  # seconds a kept fork server waits for a run before it leaves
SKIP_WARMUP = "GRADERS_SKIP_WARMUP"  # the autograder's setup.sh: skip grading the reference (its tests)

DEFAULT_CHECK_TIMEOUT = 120.0

# Set by a shell, make or a terminal for each command or window, or read by the grading child
# alone: nothing a fork server imports reads them, so they are left out of a kept server's name
# (graders/runner/kept_server.py) and each run's child is given the runner's own.
VOLATILE = frozenset({"_", "OLDPWD", "PWD", "SHLVL", "MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES",
                      "MAKE_TERMOUT", "MAKE_TERMERR", "COLUMNS", "LINES", "WINDOWID", "TMUX", "TMUX_PANE", "STY",
                      "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "GPG_TTY", "TERM_SESSION_ID", "ITERM_SESSION_ID",
                      "WT_SESSION", "KITTY_WINDOW_ID", SEED, CHECK_TIMEOUT})
VOLATILE_PREFIXES = ("VSCODE_", "GNOME_TERMINAL_", "KONSOLE_", "WEZTERM_", "ALACRITTY_", "TERMINATOR_", "__INTELLIJ")


def volatile(name: str) -> bool:
    return name in VOLATILE or name.startswith(VOLATILE_PREFIXES)


def check_timeout() -> float:
    return float(os.environ.get(CHECK_TIMEOUT, DEFAULT_CHECK_TIMEOUT))


def seed() -> int:
    return int(os.environ.get(SEED, "0"))


def take_result_fd() -> int:
    """The event pipe of a spawned child, taken out of the environment its children inherit."""
    return int(os.environ.pop(RESULT_FD))


def expected_dir() -> str | None:
    return os.environ.get(EXPECTED_DIR) or None


def no_fork() -> bool:
    return bool(os.environ.get(NO_FORK))


def resident_wanted(env: dict[str, str]) -> bool:
    return not env.get("CI") and env.get(NO_RESIDENT, "") in ("", "0")


def resident_idle(env: dict[str, str], default: float) -> float:
    try:
        seconds = float(env.get(RESIDENT_IDLE, default))
    except ValueError:
        return default
    return seconds if 0 < seconds < float("inf") else default
