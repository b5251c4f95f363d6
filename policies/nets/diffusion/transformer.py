"""Transformer denoiser: self-attention over condition tokens and the noisy action chunk (Chi et al.'s
time-series diffusion transformer, simplified to one non-causal encoder stack).

Tokens, in order: the diffusion step embedding, one token per observation in the window, one per action step; each
gets a learned position embedding. The action tokens of the last block are read out as the predicted noise.

Shapes: ``x: [B, Tp, D_a]``, ``k: [B]``, ``obs: [B, To, D_o]`` (normalised) -> ``[B, Tp, D_a]``.
"""

from __future__ import annotations

import torch
from torch import nn

from policies.nets.diffusion.embedding import StepEmbedding


class AttentionBlock(nn.Module):
    """Pre-norm transformer block: multi-head self-attention and an MLP, each residual. ``[B, T, d] -> [B, T, d]``.

    Written out with matmul and softmax (no fused kernels) so the same graph traces to ONNX on every torch build.
    """

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model {d_model} must be divisible by heads {heads}")
        self.heads = heads
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, h: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """One block; ``bias [B, 1, 1, T]`` is added to the attention logits of each key (a large negative value
        masks a padding token out; ``None``: every token attends to every token)."""
        n, t, d = h.shape
        q, k, v = self.qkv(self.norm1(h)).reshape(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        logits = q @ k.transpose(-1, -2) * (d // self.heads) ** -0.5
        att = torch.softmax(logits if bias is None else logits + bias, dim=-1)
        h = h + self.proj((att @ v).transpose(1, 2).reshape(n, t, d))
        return h + self.mlp(self.norm2(h))


class TransformerDenoiser(nn.Module):
    """The transformer denoiser (see the module docstring).

    Args:
        action_dim: ``D_a``.
        obs_dim: Width of each condition token (``D_c``: the normalised observation and any image features).
        obs_horizon: ``To``.
        pred_horizon: ``Tp``.
        d_model: Token width.
        heads: Attention heads.
        layers: Blocks.
    """

    def __init__(
        self,
        action_dim: int,
        obs_dim: int,
        obs_horizon: int,
        pred_horizon: int,
        d_model: int = 128,
        heads: int = 4,
        layers: int = 4,
    ) -> None:
        super().__init__()
        self.step = StepEmbedding(d_model)
        self.obs_in = nn.Linear(obs_dim, d_model)
        self.action_in = nn.Linear(action_dim, d_model)
        self.position = nn.Parameter(torch.zeros(1, 1 + obs_horizon + pred_horizon, d_model))
        nn.init.normal_(self.position, std=0.02)
        self.blocks = nn.ModuleList([AttentionBlock(d_model, heads) for _ in range(layers)])
        self.norm = nn.LayerNorm(d_model)
        self.out = nn.Linear(d_model, action_dim)
        self.pred_horizon = pred_horizon

    def forward(self, x: torch.Tensor, k: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """Predicted noise ``[B, Tp, D_a]``."""
        h = torch.cat((self.step(k)[:, None], self.obs_in(obs), self.action_in(x)), dim=1) + self.position
        for block in self.blocks:
            h = block(h)
        return self.out(self.norm(h[:, -self.pred_horizon :]))
