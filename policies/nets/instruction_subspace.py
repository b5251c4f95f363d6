"""The instruction subspace: a language-conditioned student sees its instruction's embedding projected onto the
affine span of its training instructions' embeddings.

A student trained on K instruction texts has seen its instruction input vary only within the span of their K
embeddings (384 values each, :mod:`policies.nets.language`): along every other direction its response is whatever
its initial weights give. A paraphrase never trained on lies mostly outside that span (``panda-multitask``'s
held-out paraphrases: 0.88-1.10 from their nearest training text, whose pairwise distances are 0.44-0.90), so the
student meets an input unlike any it learned from. Projected, ``e' = m + (e - m) P`` with ``m`` the training
embeddings' mean and ``P`` the projection onto their centred span, each held-out paraphrase lands 0.13-0.26 from
the mean of its colour's training texts and 0.56-0.70 from the others' (docs/vla.md). What no training instruction
expressed cannot be expressed: a text is read as the nearest mix of the trained ones.

With ``nearest`` (``policy.language_nearest``), the map goes one step further: every instruction is read as the
training instruction nearest to it (Euclidean, in the encoder's space), so the student only ever reads a text it
trained on. With two skills (18 training texts, a 17-dimensional span) the projection kept paraphrases 0.27-0.47
from their nearest training text and they lost 21-34 points; read as their nearest text, one held-out list lost
nothing and the other 9.5-17.5 points (docs/vla.md, "Two skills"). The cost: a paraphrase the encoder places nearest
another task's text does that task.

The mean, the projection and the nearest-text table are buffers: saved with the weights and inside the exported
graph, so the robot feeds the raw embedding (the contract's table, or a new text's embedding) and the graph maps it.
Unfitted, the map is the identity (a student that reads no subspace, and checkpoints written before it, keep their
behaviour).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

RANK_TOLERANCE = 1e-4
"""Singular values under this fraction of the largest are not part of the span (the K embeddings' numerical
rank)."""


class InstructionSubspace(nn.Module):
    """``e -> m + (e - m) P`` for embeddings ``[B, D]`` (module docstring); the identity until :meth:`fit`."""

    mean: torch.Tensor
    projection: torch.Tensor
    anchors: torch.Tensor

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("projection", torch.eye(dim))
        self.register_buffer("anchors", torch.zeros(0, dim))  # [K, D] with nearest: the training embeddings

    @torch.no_grad()
    def fit(self, table: torch.Tensor, nearest: bool = False) -> int:
        """Span the embeddings ``table [K, D]`` of the training instructions (and with ``nearest`` read every
        instruction as the nearest of them); returns the span's dimension (at most ``K - 1``)."""
        mean = table.mean(0)
        _, s, vt = torch.linalg.svd(table - mean, full_matrices=False)
        basis = vt[s > RANK_TOLERANCE * s.max().clamp(min=1e-12)]  # [k, D]
        self.mean.copy_(mean)
        self.projection.copy_(basis.T @ basis)
        self.anchors = table.detach().clone() if nearest else table.new_zeros(0, table.shape[1])
        return int(basis.shape[0])

    def nearest(self) -> int:
        """How many training instructions an instruction is snapped to (0: projected, not snapped)."""
        return int(self.anchors.shape[0])

    def dimensions(self) -> int | None:
        """The span's dimension, ``None`` while the map is the identity (unfitted)."""
        k = round(float(self.projection.trace()))
        return None if k == len(self.mean) and not self.mean.any() else k

    def forward(self, embedding: torch.Tensor) -> torch.Tensor:
        """The projected embeddings ``[B, D]`` (with ``nearest``: the nearest training embedding of each)."""
        if not len(self.anchors):
            return self.mean + (embedding - self.mean) @ self.projection
        # squared distances [B, K] without cdist (an argmin and a gather in the exported graph)
        d = (embedding * embedding).sum(-1, keepdim=True) - 2.0 * embedding @ self.anchors.T
        d = d + (self.anchors * self.anchors).sum(-1)
        return self.anchors[d.argmin(-1)]

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        # a checkpoint from before the subspace holds none of the buffers: it loads as the identity; one from before
        # nearest holds no table: it projects
        state_dict.setdefault(prefix + "mean", torch.zeros_like(self.mean))
        state_dict.setdefault(prefix + "projection", torch.eye(len(self.mean), device=self.mean.device))
        saved = state_dict.setdefault(prefix + "anchors", self.mean.new_zeros(0, len(self.mean)))
        if isinstance(saved, torch.Tensor) and saved.ndim == 2 and saved.shape[1] == len(self.mean):
            self.anchors = self.mean.new_zeros(saved.shape)  # the table's size is the checkpoint's
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
