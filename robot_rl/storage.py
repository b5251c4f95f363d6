"""Preallocated rollout buffer ``[T, N, ...]`` for on-policy training."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch


@dataclass
class Batch:
    """One minibatch, flattened over time and worlds (``B`` samples)."""

    actor_obs: torch.Tensor  # [B, D_a]
    critic_obs: torch.Tensor  # [B, D_c]
    actions: torch.Tensor  # [B, A]
    old_log_prob: torch.Tensor  # [B]
    old_mean: torch.Tensor  # [B, A]
    old_std: torch.Tensor  # [B, A]
    old_values: torch.Tensor  # [B]
    advantages: torch.Tensor  # [B]
    returns: torch.Tensor  # [B]


class RolloutStorage:
    """``T`` steps of ``N`` worlds, written in place step by step.

    Args:
        num_steps: Rollout length ``T``.
        num_envs: Worlds ``N``.
        actor_dim: Actor input size ``D_a``.
        critic_dim: Critic input size ``D_c``.
        num_actions: Action size ``A``.
        device: Device of the buffers.
    """

    def __init__(
        self, num_steps: int, num_envs: int, actor_dim: int, critic_dim: int, num_actions: int, device: torch.device
    ) -> None:
        t, n, a = num_steps, num_envs, num_actions

        def z(*shape: int) -> torch.Tensor:
            return torch.zeros(*shape, device=device)

        self.num_steps, self.num_envs = t, n
        self.actor_obs, self.critic_obs = z(t, n, actor_dim), z(t, n, critic_dim)
        self.actions, self.mean, self.std = z(t, n, a), z(t, n, a), z(t, n, a)
        self.log_prob, self.values, self.next_values, self.rewards = z(t, n), z(t, n), z(t, n), z(t, n)
        self.terminated = torch.zeros(t, n, dtype=torch.bool, device=device)
        self.dones = torch.zeros(t, n, dtype=torch.bool, device=device)
        self.advantages, self.returns = z(t, n), z(t, n)
        self.step = 0

    def minibatches(self, num_minibatches: int, num_epochs: int, gen: torch.Generator) -> Iterator[Batch]:
        """Yield ``num_epochs x num_minibatches`` shuffled minibatches covering all ``T * N`` samples each epoch."""
        total = self.num_steps * self.num_envs
        size = total // num_minibatches
        flat = {
            "actor_obs": self.actor_obs.flatten(0, 1),
            "critic_obs": self.critic_obs.flatten(0, 1),
            "actions": self.actions.flatten(0, 1),
            "old_log_prob": self.log_prob.flatten(),
            "old_mean": self.mean.flatten(0, 1),
            "old_std": self.std.flatten(0, 1),
            "old_values": self.values.flatten(),
            "advantages": self.advantages.flatten(),
            "returns": self.returns.flatten(),
        }
        # One [T*N, W] table and one row gather per minibatch: 6.8x faster than gathering nine tensors apiece
        # (bench/update_cost.py, 4096 x 16 samples, 8 minibatches).
        widths = [v.shape[1] if v.ndim == 2 else 1 for v in flat.values()]
        table = torch.cat([v.reshape(total, -1) for v in flat.values()], dim=1)
        for _ in range(num_epochs):
            perm = torch.randperm(total, generator=gen, device=gen.device)
            for i in range(num_minibatches):
                cols = torch.split(table.index_select(0, perm[i * size : (i + 1) * size]), widths, dim=1)
                yield Batch(
                    **{k: c if v.ndim == 2 else c.squeeze(1) for (k, v), c in zip(flat.items(), cols, strict=True)}
                )
