"""Checkpoints: model (with its normalisers), optimiser, counters, the resolved config and the training state that
makes a resume an exact continuation (random streams, the env's worlds), written atomically.

Layout of ``checkpoint.pt`` (a ``torch.save`` dict, loaded with ``weights_only=True``)::

    format        "robot-rl-checkpoint-v2" (v1: the same without "training"; read, resumed inexactly)
    config        resolved TrainConfig as plain data; export, eval and resume read it from here
    model         ActorCritic state dict (finite: a non-finite model is never written)
    optimizer     Adam state dict
    iteration, env_steps, elapsed_s, learning_rate
    training      {"ppo_rng": generator state, "env": VecEnv state, "obs": {group: [N, D]}, "partial": [N] bool}

A checkpoint is written only at an iteration boundary, from a consistent snapshot, so what is on disk is always
the state after a whole number of updates.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from policies.runtime.files import atomic_path

FORMAT = "robot-rl-checkpoint-v2"
READABLE_FORMATS = ("robot-rl-checkpoint-v1", FORMAT)
REQUIRED = {"config": dict, "model": dict, "optimizer": dict, "iteration": int, "env_steps": int}


class CheckpointError(ValueError):
    """A checkpoint file is missing, unreadable, non-finite or does not fit the model."""


MISMATCH_CHARS = 400
"""Longest account of what did not fit that an error message quotes (a whole other network names every key)."""


def state_dict_mismatch(exc: Exception) -> str:
    """One line naming what did not fit when ``load_state_dict`` raised ``exc``: torch's per-key complaints (missing,
    unexpected, size mismatch) joined, without its header line ("Error(s) in loading state_dict for ...")."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines()]
    detail = [ln for ln in lines[1:] if ln] if lines and lines[0].startswith("Error(s) in loading") else lines
    text = re.sub(r"torch\.Size\((\[[^\]]*\])\)", r"\1", "; ".join(ln.rstrip(". ") for ln in detail))
    return (text[:MISMATCH_CHARS] + " ...") if len(text) > MISMATCH_CHARS else text or type(exc).__name__


def first_non_finite(tensors: dict[str, Any]) -> str | None:
    """Name of the first floating-point tensor of a state dict holding NaN or inf, or ``None``."""
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all()):
            return name
    return None


def save_checkpoint(path: Path, state: dict[str, Any]) -> Path:
    """Write ``state`` (see the module docstring) to ``path`` atomically (temp file + rename).

    Raises:
        CheckpointError: The model holds non-finite values (the previous checkpoint is left untouched).
    """
    if (bad := first_non_finite(state["model"])) is not None:
        raise CheckpointError(f"refusing to write '{path}': the model's '{bad}' holds non-finite values")
    with atomic_path(path) as tmp:
        torch.save({"format": FORMAT, **state}, tmp)
    return path


BC_FORMAT = "robot-rl-bc-checkpoint-v1"
"""Format of behaviour-cloning checkpoints (``robot_rl.imitation.train_bc``)."""


def read_any_checkpoint(path: Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """Load a PPO or behaviour-cloning checkpoint's contents (the ``format`` key says which).

    Raises:
        CheckpointError: Missing, not a file, unreadable, or not a robot-rl checkpoint.
    """
    if not path.exists():
        raise CheckpointError(f"checkpoint '{path}' does not exist")
    if not path.is_file():
        raise CheckpointError(f"checkpoint '{path}' is not a file")
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:  # torch raises many types for corrupt files
        raise CheckpointError(f"checkpoint '{path}' could not be read ({type(exc).__name__}: {exc})") from None
    if not isinstance(state, dict) or state.get("format") not in (*READABLE_FORMATS, BC_FORMAT):
        raise CheckpointError(f"'{path}' is not a robot-rl checkpoint")
    return state


def read_checkpoint(path: Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """Load a PPO checkpoint's contents, with errors that name the file and what is wrong.

    Raises:
        CheckpointError: Missing, not a file, unreadable, not a robot-rl PPO checkpoint, or missing a section.
    """
    state = read_any_checkpoint(path, device)
    if state["format"] == BC_FORMAT:
        raise CheckpointError(f"'{path}' holds a behaviour-cloning policy (train-bc), not a PPO one")
    for key, kind in REQUIRED.items():
        if not isinstance(state.get(key), kind) or isinstance(state.get(key), bool):
            raise CheckpointError(f"checkpoint '{path}' is damaged: '{key}' is missing or not a {kind.__name__}")
    if not isinstance(state["config"].get("task"), str):
        raise CheckpointError(f"checkpoint '{path}' is damaged: its config names no task")
    return state


def load_checkpoint(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, device: torch.device | str
) -> dict[str, Any]:
    """Restore model (and optimiser) state from ``path``; returns the checkpoint's contents.

    Raises:
        CheckpointError: As :func:`read_checkpoint`, or the weights do not fit ``model`` or are not finite.
    """
    state = read_checkpoint(path, device)
    if (bad := first_non_finite(state["model"])) is not None:
        raise CheckpointError(f"checkpoint '{path}' holds non-finite values in '{bad}'; it cannot be used")
    try:
        model.load_state_dict(state["model"])
        if optimizer is not None:
            optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"checkpoint '{path}' does not fit this model: {state_dict_mismatch(exc)}") from None
    return state
