"""Sinusoidal embedding of the diffusion step (Vaswani et al. positional encoding, as in DDPM)."""

from __future__ import annotations

import math

import torch
from torch import nn


class StepEmbedding(nn.Module):
    """Diffusion step ``k`` -> ``[B, dim]``: sinusoids of ``k`` at geometric frequencies, then an MLP.

    Args:
        dim: Embedding width (even).

    Shapes: ``k: [B] (float or int) -> [B, dim]``.
    """

    freqs: torch.Tensor

    def __init__(self, dim: int) -> None:
        super().__init__()
        if dim % 2:
            raise ValueError(f"the step embedding width must be even, got {dim}")
        half = dim // 2
        self.register_buffer("freqs", torch.exp(-math.log(10000.0) * torch.arange(half) / max(half - 1, 1)))
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.Mish(), nn.Linear(4 * dim, dim))

    def forward(self, k: torch.Tensor) -> torch.Tensor:
        """Embed steps ``k [B]``."""
        arg = k.float()[:, None] * self.freqs[None, :]
        return self.mlp(torch.cat((arg.sin(), arg.cos()), dim=-1))
