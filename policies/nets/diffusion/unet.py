"""Conditional 1D U-Net denoiser over the time axis of an action chunk, conditioned by FiLM (Chi et al. 2023).

Every residual block modulates its features with a per-channel scale and bias computed from the condition
(diffusion step embedding + flattened observation window): ``h <- scale(c) * h + bias(c)`` (Perez et al., FiLM).

Shapes: ``x: [B, Tp, D_a]`` noisy actions, ``k: [B]`` diffusion steps, ``obs: [B, To, D_o]`` normalised
observation window (flattened into the FiLM condition) -> ``[B, Tp, D_a]`` predicted noise.
``Tp`` must be divisible by ``2 ** (len(down_dims) - 1)``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import nn

from policies.nets.diffusion.embedding import StepEmbedding


class ConvBlock(nn.Sequential):
    """Conv1d -> GroupNorm -> Mish, length preserved. ``[B, C_in, T] -> [B, C_out, T]``."""

    def __init__(self, c_in: int, c_out: int, kernel: int, groups: int) -> None:
        super().__init__(nn.Conv1d(c_in, c_out, kernel, padding=kernel // 2), nn.GroupNorm(groups, c_out), nn.Mish())


class FiLMResidualBlock(nn.Module):
    """Two conv blocks with a FiLM modulation between them and a residual connection.

    Shapes: ``h: [B, C_in, T], cond: [B, C] -> [B, C_out, T]``.
    """

    def __init__(self, c_in: int, c_out: int, cond_dim: int, kernel: int, groups: int) -> None:
        super().__init__()
        self.first = ConvBlock(c_in, c_out, kernel, groups)
        self.second = ConvBlock(c_out, c_out, kernel, groups)
        self.film = nn.Sequential(nn.Mish(), nn.Linear(cond_dim, 2 * c_out))
        self.skip = nn.Conv1d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, h: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """Residual FiLM block."""
        out = self.first(h)
        scale, bias = self.film(cond)[:, :, None].chunk(2, dim=1)
        return self.second(scale * out + bias) + self.skip(h)


class ConditionalUnet1D(nn.Module):
    """The U-Net denoiser (see the module docstring).

    Args:
        action_dim: ``D_a``.
        cond_dim: Width of the flattened observation window ``To * D_o``.
        down_dims: Channels per level (the chunk is halved in time between levels).
        step_dim: Width of the diffusion step embedding.
        kernel: Convolution kernel size (odd).
        groups: GroupNorm groups (must divide every channel count).
    """

    def __init__(
        self,
        action_dim: int,
        cond_dim: int,
        down_dims: Sequence[int] = (64, 128, 256),
        step_dim: int = 64,
        kernel: int = 5,
        groups: int = 8,
    ) -> None:
        super().__init__()
        if not down_dims or any(d % groups for d in down_dims):
            raise ValueError(f"down_dims {list(down_dims)} must be non-empty and divisible by groups={groups}")
        self.levels = len(down_dims)
        self.step = StepEmbedding(step_dim)
        c = step_dim + cond_dim
        dims = [action_dim, *down_dims]
        self.down_blocks = nn.ModuleList()
        self.down_samples = nn.ModuleList()
        for i, (a, b) in enumerate(itertools.pairwise(dims)):
            last = i == len(down_dims) - 1
            self.down_blocks.append(FiLMResidualBlock(a, b, c, kernel, groups))
            self.down_samples.append(nn.Identity() if last else nn.Conv1d(b, b, 3, stride=2, padding=1))
        mid = down_dims[-1]
        self.mid = nn.ModuleList([FiLMResidualBlock(mid, mid, c, kernel, groups) for _ in range(2)])
        self.up_blocks = nn.ModuleList()
        self.up_samples = nn.ModuleList()
        for a, b in reversed(list(itertools.pairwise(down_dims))):  # concat with the skip: 2 b -> a, then upsample
            self.up_blocks.append(FiLMResidualBlock(2 * b, a, c, kernel, groups))
            self.up_samples.append(nn.ConvTranspose1d(a, a, 4, stride=2, padding=1))
        width = down_dims[0]
        self.out = nn.Sequential(ConvBlock(width, width, kernel, groups), nn.Conv1d(width, action_dim, 1))

    def forward(self, x: torch.Tensor, k: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """Predicted noise ``[B, Tp, D_a]``."""
        c = torch.cat((self.step(k), obs.flatten(1)), dim=-1)
        h = x.transpose(1, 2)
        skips = []
        for block, sample in zip(self.down_blocks, self.down_samples, strict=True):
            h = block(h, c)
            skips.append(h)
            h = sample(h)
        for block in self.mid:
            h = block(h, c)
        for block, sample in zip(self.up_blocks, self.up_samples, strict=True):
            h = sample(block(torch.cat((h, skips.pop()), dim=1), c))
        return self.out(h).transpose(1, 2)
