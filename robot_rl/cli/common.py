"""What every verb of the command line shares: the one-line argument parser, the exceptions that are the user's
errors (exit status 2, one line), and the checks of numbers and folders made before any work."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from firmware_export.graph import UnsupportedModelError
from firmware_export.quantize import CalibrationError
from firmware_export.targets import ToolchainError
from policies.nets.language import LanguageError
from policies.nets.rsl_rl import RslRlCheckpointError
from policies.runtime.contract import ContractError
from policies.runtime.files import OutputFolderError
from policies.runtime.onnx_policy import PolicyFileError
from robot_rl.checkpoint import CheckpointError
from robot_rl.distributed import DistributedConfigError
from robot_rl.imitation.dataset import DatasetError
from sim.backends.physics import BackendError
from sim.registry import EntryPointError, UnknownTaskError
from sim.typed_config import ConfigError
from sim.vec_env import TaskConfigError

if TYPE_CHECKING:
    from robot_rl.runs import BCRun, PPORun

USER_ERRORS = (
    BackendError,
    DatasetError,
    LanguageError,
    ConfigError,
    PolicyFileError,
    TaskConfigError,
    ContractError,
    CheckpointError,
    RslRlCheckpointError,
    UnknownTaskError,
    EntryPointError,
    UnsupportedModelError,
    CalibrationError,
    ToolchainError,
    DistributedConfigError,
    OutputFolderError,
    OSError,
)
"""Exceptions that are the user's errors: exit status 2 and one line naming what is wrong."""
MAX_EPISODES = 1 << 16
"""Most evaluation episodes one ``eval`` may run (one world each)."""
MAX_NAMED_EDITS = 5
"""Most edited ``config.yaml`` keys one note names (the rest are counted)."""
MAX_KEY_CHARS = 80
"""Longest key name a note prints whole (a longer one, from a hand-edited file, is cut)."""


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (and exit status 2), like every other user error."""

    def error(self, message: str) -> NoReturn:
        """Print ``robot-rl <command>: error: <message> (see --help)`` and exit with status 2."""
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def check_folder_writable(path: Path, what: str) -> None:
    """Refuse, before any work, a folder that cannot be created or written (``what`` names it in the message).

    The nearest existing ancestor must be a folder the user may write; an existing ``path`` must be a folder.

    Raises:
        ConfigError: Naming the folder and the problem.
    """
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{what} '{path}' is a file, not a folder")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{what} '{path}' cannot be created: '{existing}' is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{what} '{path}' cannot be written: '{existing}' is read-only")


def in_range(name: str, value: float, low: float, high: float) -> None:
    """Refuse ``value`` outside ``[low, high]`` (or not finite), naming the flag ``name``.

    Raises:
        ConfigError: One line.
    """
    if not (math.isfinite(value) and low <= value <= high):
        raise ConfigError(f"{name} must be in [{low:.12g}, {high:.12g}], got {value}")


def silent(*args: object, **kwargs: object) -> None:
    """``print`` for ranks other than 0."""


def open_run_noting_edits(run_dir: Path, device: str = "cpu") -> PPORun | BCRun:
    """:func:`robot_rl.runs.open_run`, saying on stderr (one line) where the folder's ``config.yaml`` was edited: the
    config saved with the policy is what loads, so such an edit changes nothing and the user should know it."""
    import sys

    from policies.runtime.text import printable
    from robot_rl.runs import PPORun, open_run

    run = open_run(run_dir, device)
    if isinstance(run, PPORun) and run.config_edits:
        keys = ", ".join(
            k if len(k) <= MAX_KEY_CHARS else f"{k[: MAX_KEY_CHARS - 3]}..." for k in run.config_edits[:MAX_NAMED_EDITS]
        )
        more = len(run.config_edits) - MAX_NAMED_EDITS
        keys += f" and {more} more" if more > 0 else ""
        print(
            printable(
                f"robot-rl: note: '{run_dir / 'config.yaml'}' differs from the config saved with the policy at "
                f"{keys}; the saved config is used (editing config.yaml changes nothing; "
                f"'robot-rl eval {run_dir} --set env.KEY=VALUE' evaluates the policy in another world)"
            ),
            file=sys.stderr,
        )
    return run
