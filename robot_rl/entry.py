"""The ``robot-rl`` console script: loads the command line inside a guard, so that Ctrl-C while Python imports torch
(a second or more) ends with one line and status 130 instead of a traceback. :mod:`robot_rl.cli` holds the rest."""

from __future__ import annotations

import sys


def main() -> int:
    """Entry point of ``robot-rl``; returns the exit status."""
    try:
        from robot_rl.cli import main as cli_main
    except KeyboardInterrupt:
        print("robot-rl: error: interrupted (Ctrl-C) while starting; nothing was written", file=sys.stderr)
        return 130
    return cli_main()
