"""GAE and the PPO losses as small pure functions (shapes in the docstrings)."""

from __future__ import annotations

import torch


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    dones: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation with time-outs bootstrapped.

    ``next_values[t]`` is the value of the state reached by step ``t``: for a step that ended its episode by the
    time limit it is ``V(final_obs)`` (the episode did not really end, so it is bootstrapped); for a termination
    it is ignored (``terminated`` masks it); otherwise it is ``values[t + 1]`` (or the bootstrap value after the
    last step)::

        delta_t = r_t + gamma * (1 - terminated_t) * next_values_t - values_t
        A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1}

    Args:
        rewards: ``[T, N]`` rewards.
        values: ``[T, N]`` value estimates of the states the actions were taken in.
        next_values: ``[T, N]`` value estimates of the states reached.
        terminated: ``[T, N]`` bool, episode ended by failure or success (no bootstrap).
        dones: ``[T, N]`` bool, episode ended for any reason (terminated or truncated).
        gamma: Discount factor.
        lam: GAE lambda.

    Returns:
        ``(advantages [T, N], returns [T, N])`` with ``returns = advantages + values``.
    """
    not_term = 1.0 - terminated.float()
    not_done = 1.0 - dones.float()
    deltas = rewards + gamma * not_term * next_values - values
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in range(rewards.shape[0] - 1, -1, -1):
        running = deltas[t] + gamma * lam * not_done[t] * running
        advantages[t] = running
    return advantages, advantages + values


def surrogate_loss(
    log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor, clip: float
) -> torch.Tensor:
    """Clipped PPO surrogate (to minimise), ``[B]`` inputs -> scalar.

    ``L = -mean(min(rho A, clip(rho, 1 - clip, 1 + clip) A))`` with ``rho = exp(log_prob - old_log_prob)``.
    """
    ratio = torch.exp(log_prob - old_log_prob)
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip, 1.0 + clip) * advantages
    return -torch.min(unclipped, clipped).mean()


def value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip: float | None
) -> torch.Tensor:
    """Value regression loss, ``[B]`` inputs -> scalar; with ``clip``, the PPO-style clipped variant."""
    if clip is None:
        return (returns - values).square().mean()
    clipped = old_values + (values - old_values).clamp(-clip, clip)
    return torch.max((returns - values).square(), (returns - clipped).square()).mean()


def gaussian_kl(mu0: torch.Tensor, std0: torch.Tensor, mu1: torch.Tensor, std1: torch.Tensor) -> torch.Tensor:
    """Mean KL(N0 || N1) of diagonal Gaussians, ``[B, A]`` inputs -> scalar (summed over actions)."""
    kl = torch.log(std1 / std0) + (std0.square() + (mu0 - mu1).square()) / (2.0 * std1.square()) - 0.5
    return kl.sum(-1).mean()
