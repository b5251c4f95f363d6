"""Plain behaviour cloning with an MLP head: the baseline a diffusion policy has to beat."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from policies.nets.chunk import ChunkPolicy, Horizons
from policies.nets.mlp import mlp


class MLPChunkPolicy(ChunkPolicy):
    """Regress the whole action chunk from the flattened observation window (mean squared error).

    Shapes: ``obs [B, To, D_o] -> action [B, Tp, D_a]``; the MLP maps ``To * D_o -> Tp * D_a`` in normalised units.

    Args:
        hidden: Hidden layer sizes.
        activation: See :data:`policies.nets.mlp.ACTIVATIONS`.
        (others): See :class:`~policies.nets.chunk.ChunkPolicy`.
    """

    kind = "mlp"

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        horizons: Horizons,
        obs_low: np.ndarray,
        obs_high: np.ndarray,
        action_low: np.ndarray,
        action_high: np.ndarray,
        hidden: Sequence[int] = (256, 256, 256),
        activation: str = "relu",
    ) -> None:
        super().__init__(obs_dim, action_dim, horizons, obs_low, obs_high, action_low, action_high)
        self.net = mlp(horizons.obs * obs_dim, hidden, horizons.pred * action_dim, activation)

    def _normalized_chunk(self, obs: torch.Tensor) -> torch.Tensor:
        self.check_obs(obs)
        y = self.net(self.obs_norm(obs).flatten(1))
        return y.view(obs.shape[0], self.horizons.pred, self.action_dim)

    def compute_loss(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """Mean squared error in normalised action units."""
        loss = torch.nn.functional.mse_loss(self._normalized_chunk(obs), self.action_norm(action))
        return loss, {"loss": float(loss.detach())}

    def predict_action_chunk(self, obs: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        """Deterministic chunk; ``noise`` is ignored."""
        return self.action_norm.unnormalize(self._normalized_chunk(obs)).clamp(-1.0, 1.0)
