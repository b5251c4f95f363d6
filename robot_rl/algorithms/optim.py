"""Optimiser settings the trainers share (PPO in :mod:`robot_rl.algorithms.ppo`, behaviour cloning in
:mod:`robot_rl.imitation.train_bc`)."""

from __future__ import annotations

import torch


def fused(device: torch.device) -> bool | None:
    """``fused=`` for torch's Adam and AdamW on ``device``: one kernel per step for all parameter tensors instead of
    a dozen small ops per tensor, where torch has it (CPU, CUDA); ``None`` (torch's own choice) elsewhere. The same
    update up to float rounding; on one CPU thread the optimiser step is 3.6x cheaper for PPO's actor-critic and
    4-6.7x for a student's AdamW (``bench/bc_step.py``; docs/benchmarks.md)."""
    return device.type in ("cpu", "cuda") or None
