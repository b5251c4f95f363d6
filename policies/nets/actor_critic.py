"""Asymmetric actor-critic: the actor sees onboard observations, the critic privileged simulator state.

Both networks own a running normaliser of their input, so checkpoints and exports carry it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn
from torch.distributions import Normal

from policies.nets.mlp import mlp
from policies.nets.normalizer import EmpiricalNormalizer, Merge


class ActorCritic(nn.Module):
    """Gaussian policy with state-independent log standard deviation and a separate value network.

    Args:
        actor_obs_dim: Size of the actor input ``D_a`` (concatenated actor observation groups).
        critic_obs_dim: Size of the critic input ``D_c`` (concatenated critic observation groups).
        num_actions: Action size ``A`` (normalised actions in ``[-1, 1]``).
        actor_hidden: Hidden sizes of the actor MLP.
        critic_hidden: Hidden sizes of the critic MLP.
        activation: Activation name (``elu``, ``tanh``, ``relu``, ``silu``).
        init_noise_std: Initial standard deviation of the action distribution.

    Shapes: ``actor_obs: [B, D_a] -> mean: [B, A]``; ``critic_obs: [B, D_c] -> value: [B]``.
    """

    def __init__(
        self,
        actor_obs_dim: int,
        critic_obs_dim: int,
        num_actions: int,
        actor_hidden: Sequence[int] = (64, 64),
        critic_hidden: Sequence[int] = (128, 128),
        activation: str = "tanh",
        init_noise_std: float = 0.5,
    ) -> None:
        super().__init__()
        self.actor_normalizer = EmpiricalNormalizer(actor_obs_dim)
        self.critic_normalizer = EmpiricalNormalizer(critic_obs_dim)
        self.actor = mlp(actor_obs_dim, actor_hidden, num_actions, activation, out_gain=0.01)
        self.critic = mlp(critic_obs_dim, critic_hidden, 1, activation, out_gain=1.0)
        self.log_std = nn.Parameter(torch.full((num_actions,), math.log(init_noise_std)))

    @property
    def obs_dim(self) -> int:
        """Size ``D_a`` of the actor input."""
        return self.actor_normalizer.mean.numel()

    @property
    def num_actions(self) -> int:
        """Action size ``A``."""
        return self.log_std.numel()

    def action_mean(self, actor_obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action ``[B, A]`` (unclipped mean) from raw actor observations ``[B, D_a]``."""
        return self.actor(self.actor_normalizer(actor_obs))

    def distribution(self, actor_obs: torch.Tensor) -> Normal:
        """Action distribution for raw actor observations ``[B, D_a]``."""
        return self.distribution_normalized(self.actor_normalizer(actor_obs))

    def distribution_normalized(self, actor_in: torch.Tensor) -> Normal:
        """Action distribution for already normalised actor inputs ``[B, D_a]`` (what PPO stores and replays)."""
        mean = self.actor(actor_in)
        return Normal(mean, self.log_std.exp().expand_as(mean), validate_args=False)  # PPO checks finiteness itself

    def value(self, critic_obs: torch.Tensor) -> torch.Tensor:
        """State value ``[B]`` from raw critic observations ``[B, D_c]``."""
        return self.value_normalized(self.critic_normalizer(critic_obs))

    def value_normalized(self, critic_in: torch.Tensor) -> torch.Tensor:
        """State value ``[B]`` from already normalised critic inputs ``[B, D_c]``."""
        return self.critic(critic_in).squeeze(-1)

    def first_non_finite(self) -> str | None:
        """Name of the first parameter or buffer (normaliser statistics included) holding NaN or inf, or ``None``."""
        for name, t in (*self.named_parameters(), *self.named_buffers()):
            if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                return name
        return None

    def update_normalizers(self, actor_obs: torch.Tensor, critic_obs: torch.Tensor, merge: Merge | None = None) -> None:
        """Fold a batch of raw observations into the running statistics (``merge``: see ``EmpiricalNormalizer``)."""
        self.actor_normalizer.update(actor_obs, merge)
        self.critic_normalizer.update(critic_obs, merge)
