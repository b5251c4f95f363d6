"""Reward terms shared by tasks: small pure functions, shapes in the docstrings. Scales live in task configs."""

from __future__ import annotations

import torch


def alive(num_envs: int, device: torch.device) -> torch.Tensor:
    """Constant 1 per world ``[N]``: a bonus for every control step the episode goes on."""
    return torch.ones(num_envs, device=device)


def squared_norm(x: torch.Tensor) -> torch.Tensor:
    """``sum(x**2)`` over the last axis, ``[N, D] -> [N]``."""
    return x.square().sum(-1)


def exp_kernel(err_sq: torch.Tensor, sigma: float) -> torch.Tensor:
    """``exp(-err_sq / sigma**2)`` in ``(0, 1]``, ``[N] -> [N]``; 1 at zero error."""
    return torch.exp(-err_sq / (sigma * sigma))


def tanh_kernel(dist: torch.Tensor, scale: float) -> torch.Tensor:
    """``1 - tanh(dist / scale)`` in ``(0, 1]``, ``[N] -> [N]``; unlike :func:`exp_kernel` its slope reaches far out
    (still 0.08 at ``dist = 1.6 scale``), so it guides from a distant start."""
    return 1.0 - torch.tanh(dist / scale)


def event(flag: torch.Tensor, dt: float) -> torch.Tensor:
    """A one-off event (crash, goal reached) as a rate: ``flag / dt``, ``[N] bool -> [N]``.

    Tasks report reward terms as per-second rates that the env multiplies by ``scale * dt``; dividing by ``dt``
    makes ``scale`` the reward per event, independent of the control rate.
    """
    return flag.float() / dt
