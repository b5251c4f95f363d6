"""The ``robot-rl`` console script: loads the command line inside a guard, so that Ctrl-C while Python imports torch
(a second or more) ends with one line and status 130 instead of a traceback. :mod:`robot_rl.cli` holds the rest.

Isaac Gym refuses to load once torch is imported (its ``gymdeps`` check), so with ``env.backend=isaacgym`` on the
command line it is imported here first; where it is missing, the backend says so in one line later.

The process is this command alone, so the CLI runs with ``console=True``: ``robot-rl deploy`` may then end it when
releasing DDS hangs (see :func:`robot_rl_ros.graph.run_graph`)."""

from __future__ import annotations

import contextlib
import sys


def main() -> int:
    """Entry point of ``robot-rl``; returns the exit status."""
    try:
        if any(arg.replace(" ", "").endswith("env.backend=isaacgym") for arg in sys.argv[1:]):
            _import_isaacgym_first()
        from robot_rl.cli import main as cli_main
    except KeyboardInterrupt:
        print("robot-rl: error: interrupted (Ctrl-C) while starting; nothing was written", file=sys.stderr)
        return 130
    return cli_main(console=True)


def _import_isaacgym_first() -> None:
    """Import Isaac Gym before torch (see the module docstring); a missing one is reported by the backend."""
    with contextlib.suppress(ImportError):
        import isaacgym  # noqa: F401
