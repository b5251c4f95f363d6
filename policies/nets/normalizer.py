"""Running observation normaliser that travels with the policy (saved in checkpoints, baked into ONNX)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

Merge = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
"""``(count, mean [D], var [D]) -> (count, mean, var)`` of a larger batch (see :meth:`EmpiricalNormalizer.update`)."""


class EmpiricalNormalizer(nn.Module):
    """``y = clip((x - mean) / sqrt(var + eps), -clip, clip)`` with mean and variance tracked over all samples seen.

    Args:
        size: Feature size ``D``.
        eps: Variance floor, avoids division by zero for constant features.
        clip: Symmetric clip of the normalised value.

    Shapes: ``x: [B, D] -> y: [B, D]``.
    """

    def __init__(self, size: int, eps: float = 1e-4, clip: float = 10.0) -> None:
        super().__init__()
        self.eps = eps
        self.clip = clip
        self.register_buffer("mean", torch.zeros(size))
        self.register_buffer("var", torch.ones(size))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.frozen = False

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x`` with the current statistics (no update)."""
        return ((x - self.mean) * torch.rsqrt(self.var + self.eps)).clamp(-self.clip, self.clip)

    @torch.no_grad()
    def update(self, x: torch.Tensor, merge: Merge | None = None) -> None:
        """Merge the statistics of a batch ``[B, D]`` (Chan et al. parallel variance).

        Args:
            x: Raw observations ``[B, D]``.
            merge: Turns this batch's ``(count, mean, biased var)`` into those of a larger batch (data-parallel
                training passes the union of every rank's batch, so all ranks fold in the same statistics).
        """
        if self.frozen:
            return
        n = torch.tensor(float(x.shape[0]), dtype=torch.float64, device=x.device)
        batch_mean = x.mean(0)
        batch_var = x.var(0, unbiased=False)
        if merge is not None:
            n, batch_mean, batch_var = merge(n, batch_mean, batch_var)
        total = self.count + n
        w = (n / total).to(x.dtype)
        delta = batch_mean - self.mean
        self.mean += delta * w
        self.var.copy_(self.var * (1 - w) + batch_var * w + delta.square() * w * (1 - w))
        self.count.copy_(total)
