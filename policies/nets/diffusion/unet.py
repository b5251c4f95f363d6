"""Conditional 1D U-Net denoiser over the time axis of an action chunk, conditioned by FiLM (Chi et al. 2023).

Every residual block modulates its features with a per-channel scale and bias computed from the condition
(diffusion step embedding + flattened observation window): ``h <- scale(c) * h + bias(c)`` (Perez et al., FiLM).
The FiLM layer is linear after an element-wise Mish, so it splits into a step part and an observation part, which
the exported fixed-step sampler uses (:mod:`policies.nets.diffusion.fixed_step`).

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
        scale, bias = self.film(cond)[:, :, None].chunk(2, dim=1)
        return self.modulated(h, scale, bias)

    def modulated(self, h: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """The block given its FiLM output (``scale, bias: [B, C_out, 1]``) instead of the condition."""
        return self.second(scale * self.first(h) + bias) + self.skip(h)

    @property
    def film_linear(self) -> nn.Linear:
        """The FiLM layer's linear map, ``[B, C] -> [B, 2 C_out]`` (scale rows, then bias rows), after its Mish."""
        linear = self.film[1]
        assert isinstance(linear, nn.Linear)
        return linear


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
        self.step_dim = step_dim
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
        films = [block.film(c)[:, :, None].chunk(2, dim=1) for block in self.blocks()]
        return self.trunk(x.transpose(1, 2), films).transpose(1, 2)

    def blocks(self) -> list[FiLMResidualBlock]:
        """The FiLM blocks in the order :meth:`trunk` uses them (down, middle, up)."""
        return [*self.down_blocks, *self.mid, *self.up_blocks]

    def trunk(self, h: torch.Tensor, films: Sequence[Sequence[torch.Tensor]]) -> torch.Tensor:
        """The convolutional path, channels first, given every block's FiLM output instead of the condition.

        Shapes: ``h [B, D_a, T]`` and ``(scale, bias)`` ``[B, C, 1]`` per block in :meth:`blocks` order ->
        ``[B, D_a, T]``. (:class:`~policies.nets.diffusion.fixed_step.FixedStepUnet` runs it on ``[B, D_a, 1, T]``
        with 2-D convolutions and ``[B, C, 1, 1]`` FiLM terms.)
        """
        film = iter(zip(self.blocks(), films, strict=True))

        def block(h: torch.Tensor) -> torch.Tensor:
            residual, (scale, bias) = next(film)
            return residual.modulated(h, scale, bias)

        skips = []
        for sample in self.down_samples:
            skips.append(block(h))
            h = sample(skips[-1])
        for _ in self.mid:
            h = block(h)
        for sample in self.up_samples:
            h = sample(block(torch.cat((h, skips.pop()), dim=1)))
        return self.out(h)
