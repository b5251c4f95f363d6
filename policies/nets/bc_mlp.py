"""Plain behaviour cloning with an MLP head: the baseline a diffusion policy has to beat."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from policies.nets.chunk import ChunkPolicy, Images
from policies.nets.mlp import mlp


class MLPChunkPolicy(ChunkPolicy):
    """Regress the whole action chunk from the flattened observation window (mean squared error).

    Shapes: ``obs [B, To, D_o] (+ images) -> action [B, Tp, D_a]``; the MLP maps the flattened conditioning
    ``To * D_c -> Tp * D_a`` in normalised units.

    Args:
        shape: ``obs_dim, action_dim, horizons, obs_low, obs_high, action_low, action_high`` of
            :class:`~policies.nets.chunk.ChunkPolicy`.
        hidden: Hidden layer sizes.
        activation: See :data:`policies.nets.mlp.ACTIVATIONS`.
        vision: ``cameras``, ``image_features``, ``image_shift`` (see :class:`~policies.nets.chunk.ChunkPolicy`).
        (others): See :class:`~policies.nets.chunk.ChunkPolicy`.
    """

    kind = "mlp"

    def __init__(
        self, *shape: Any, hidden: Sequence[int] = (256, 256, 256), activation: str = "relu", **vision: Any
    ) -> None:
        super().__init__(*shape, **vision)
        h = self.horizons
        self.net = mlp(h.obs * self.cond_dim, hidden, h.pred * self.action_dim, activation)

    def _normalized_chunk(
        self, obs: torch.Tensor, images: Images | None, instruction: torch.Tensor | None
    ) -> torch.Tensor:
        y = self.net(self.condition(obs, images, instruction).flatten(1))
        return y.view(obs.shape[0], self.horizons.pred, self.action_dim)

    def compute_loss(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        images: Images | None = None,
        instruction: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Mean squared error in normalised action units."""
        chunk = self._normalized_chunk(obs, images, instruction)
        loss = torch.nn.functional.mse_loss(chunk, self.action_norm(action))
        return loss, {"loss": float(loss.detach())}

    def predict_action_chunk(
        self,
        obs: torch.Tensor,
        noise: torch.Tensor | None = None,
        *,
        images: Images | None = None,
        instruction: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Deterministic chunk; ``noise`` is ignored."""
        chunk = self._normalized_chunk(obs, images, instruction)
        return self.action_norm.unnormalize(chunk).clamp(-1.0, 1.0)
