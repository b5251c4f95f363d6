"""Checkpoints: model (with its normalisers), optimiser, counters and the resolved config, written atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from policies.runtime.files import atomic_path
from robot_rl.typed_config import to_dict


class CheckpointError(ValueError):
    """A checkpoint file is missing, unreadable or does not fit the model."""


def save_checkpoint(
    path: Path,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    cfg: Any,
    iteration: int,
    env_steps: int,
    elapsed_s: float,
    learning_rate: float,
) -> Path:
    """Write a checkpoint to ``path`` (temp file + rename: an interruption never leaves half a file)."""
    state = {
        "format": "robot-rl-checkpoint-v1",
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "config": to_dict(cfg),
        "iteration": iteration,
        "env_steps": env_steps,
        "elapsed_s": elapsed_s,
        "learning_rate": learning_rate,
    }
    with atomic_path(path) as tmp:
        torch.save(state, tmp)
    return path


def read_checkpoint(path: Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """Load a checkpoint's contents, with errors that name the file."""
    if not path.is_file():
        raise CheckpointError(f"checkpoint '{path}' does not exist")
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:  # torch raises many types for corrupt files
        raise CheckpointError(f"checkpoint '{path}' could not be read ({type(exc).__name__}: {exc})") from None
    if not isinstance(state, dict) or state.get("format") != "robot-rl-checkpoint-v1":
        raise CheckpointError(f"'{path}' is not a robot-rl checkpoint")
    return state


def load_checkpoint(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, device: torch.device | str
) -> dict[str, Any]:
    """Restore model (and optimiser) state from ``path``; returns the checkpoint's contents."""
    state = read_checkpoint(path, device)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as exc:
        raise CheckpointError(f"checkpoint '{path}' does not fit this model: {exc}") from None
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    return state
