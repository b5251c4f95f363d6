"""One interface to a run folder, whatever trained it: ``open_run(dir) -> Run``.

:func:`open_run` reads the checkpoint's format once and returns a :class:`~robot_rl.runs.ppo.PPORun` (``robot-rl
train``) or a :class:`~robot_rl.runs.bc.BCRun` (``robot-rl train-bc``). Every kind has the same surface, which the
command line uses without asking what kind it has:

- ``run.task``, ``run.kind``, ``run.run_dir``, ``run.cfg``;
- ``run.contract()``: the deployment contract its export carries;
- ``run.evaluate(episodes, ...)``: evaluation in simulation, writing ``eval.yaml`` / ``eval.png``;
- ``run.export(out_dir=None)``: ``policy.onnx`` + ``contract.yaml``;
- ``run.describe()``: one line.

- ``run.set_env(overrides)``: evaluate in another world (``eval --set env.KEY=VALUE``), refused where it changes
  the interface (:mod:`robot_rl.runs.worlds`, the checks every kind runs).

A new policy kind adds its run class (a module here) and one branch in :func:`open_run`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from policies.runtime.contract import Contract
from robot_rl.checkpoint import BC_FORMAT, CheckpointError, read_any_checkpoint
from robot_rl.runs.bc import BCRun
from robot_rl.runs.ppo import PPORun, new_run_dir

__all__ = ["BCRun", "PPORun", "Run", "new_run_dir", "open_run", "run_kind"]


class Run(Protocol):
    """What every run kind offers (see the module docstring)."""

    run_dir: Path
    cfg: Any
    kind: str

    @property
    def task(self) -> str:
        """The task it was trained on or for."""
        ...

    def contract(self) -> Contract:
        """The deployment contract."""
        ...

    def evaluate(self, episodes: int) -> Any:
        """Evaluate in simulation; writes ``eval.yaml`` and ``eval.png``."""
        ...

    def export(self, out_dir: Path | None = None) -> Path:
        """``policy.onnx`` + ``contract.yaml``."""
        ...

    def describe(self) -> str:
        """One line."""
        ...


def run_kind(run_dir: Path) -> str:
    """``"bc"`` or ``"ppo"``, from the checkpoint's format.

    Raises:
        CheckpointError: Not a run folder, or its checkpoint is unreadable.
    """
    if not run_dir.exists():
        raise CheckpointError(f"run folder '{run_dir}' does not exist")
    if not run_dir.is_dir():
        raise CheckpointError(f"'{run_dir}' is a file, not a run folder")
    if not (run_dir / "checkpoint.pt").exists():
        raise CheckpointError(f"'{run_dir}' is not a run folder (no checkpoint.pt)")
    return "bc" if read_any_checkpoint(run_dir / "checkpoint.pt").get("format") == BC_FORMAT else "ppo"


def open_run(run_dir: Path, device: str = "cpu") -> PPORun | BCRun:
    """The run in ``run_dir``, loaded (see the module docstring).

    Raises:
        CheckpointError: Not a run folder, or its checkpoint is unusable.
        ConfigError: Its saved config is invalid.
    """
    if run_kind(run_dir) == "bc":
        return BCRun.load(run_dir, device)
    return PPORun.load(run_dir, device)
