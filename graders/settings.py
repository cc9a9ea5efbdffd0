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
SANDBOX_LEVEL = "GRADERS_SANDBOX_LEVEL"  # --sandbox at this level ("namespaces", "user") instead of the strongest
RECORD_EXPECTED = "GRADERS_RECORD_EXPECTED"  # make release: where @expected computations record their calls (kit/expected.py)
SKIP_WARMUP = "GRADERS_SKIP_WARMUP"  # the autograder's setup.sh: skip grading the reference (its tests)

DEFAULT_CHECK_TIMEOUT = 120.0

# Set by a shell, make or a terminal for each command or window; by a notebook server, an IDE or a
# login for each process or session it starts (a kernel is one); or read by the grading child
# alone (child/session.py). Nothing a server imports reads them, and the child is given the runner's.
# Left in the name, each Jupyter kernel (JPY_PARENT_PID: the server's pid) or editor window
# would start a server of its own, about 200 MB each, until its idle limit.
VOLATILE = frozenset({
    # shells, make, terminals, multiplexers, remote logins
    "_", "OLDPWD", "PWD", "SHLVL", "MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES", "MAKE_TERMOUT",
    "MAKE_TERMERR", "COLUMNS", "LINES", "WINDOWID", "TMUX", "TMUX_PANE", "STY", "SSH_CLIENT", "SSH_CONNECTION",
    "SSH_TTY", "SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_TTY", "TERM_SESSION_ID", "ITERM_SESSION_ID", "WT_SESSION",
    "KITTY_WINDOW_ID", "KITTY_PID", "SECURITYSESSIONID",
    # a desktop or systemd session, and the unit a server was started in
    "XDG_SESSION_ID", "XDG_ACTIVATION_TOKEN", "DESKTOP_STARTUP_ID", "DBUS_SESSION_BUS_ADDRESS", "SESSION_MANAGER",
    "INVOCATION_ID", "JOURNAL_STREAM", "SYSTEMD_EXEC_PID", "MANAGERPID",
    # Jupyter: jupyter_client gives each kernel JPY_PARENT_PID (and on Windows JPY_INTERRUPT_EVENT,
    # IPY_INTERRUPT_EVENT), jupyter_server its notebook's path in JPY_SESSION_NAME, and a terminal
    # the server's root and URL; Enterprise Gateway and kernel provisioners set KERNEL_ID.
    "IPY_INTERRUPT_EVENT", "KERNEL_ID", "JUPYTER_SERVER_ROOT", "JUPYTER_SERVER_URL",
    # JetBrains IDEs: where the IDE was started
    "IDEA_INITIAL_DIRECTORY",
    # the grading child's own settings
    SEED, CHECK_TIMEOUT})
# JPY_*: Jupyter's per-kernel variables above and JupyterHub's JPY_API_TOKEN; JUPYTERHUB_*: a
# spawn's token and URLs; VSCODE_*: VS Code's pid, IPC sockets (VSCODE_IPC_HOOK*, VSCODE_GIT_IPC_HANDLE)
# and its Jupyter extension's; PYCHARM_*, _INTELLIJ*, __INTELLIJ*, JEDITERM_*: a JetBrains IDE's
# display port, plots console and terminal; the rest, terminals' windows and panes.
VOLATILE_PREFIXES = ("JPY_", "JUPYTERHUB_", "VSCODE_", "PYCHARM_", "_INTELLIJ", "__INTELLIJ", "JEDITERM_",
                     "GNOME_TERMINAL_", "KONSOLE_", "WEZTERM_", "ALACRITTY_", "TERMINATOR_")


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


def sandbox_level() -> str | None:
    return os.environ.get(SANDBOX_LEVEL) or None
