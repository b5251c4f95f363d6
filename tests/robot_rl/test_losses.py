"""GAE and the PPO losses against numbers worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import Normal, kl_divergence

from policies.nets import ActorCritic
from robot_rl.algorithms.losses import gae, gaussian_kl, surrogate_loss, value_loss
from robot_rl.algorithms.ppo import PPO, PPOConfig

# ------------------------------------------------------------------------------------------------------ GAE
# T = 3 steps, N = 2 worlds, gamma = 0.5, lam = 0.5 (so gamma * lam = 0.25). Tensors are [T, N].
#
# World 0 TERMINATES at t = 1 (crash: no bootstrap, next_values[1] is ignored whatever it holds):
#   r = [1, 2, 3], V = [0.5, 1.0, 1.5], next_values = [V_1 = 1.0, 99 (ignored), bootstrap 4.0]
#   delta_2 = 3 + 0.5 * 4.0 - 1.5        = 3.5    A_2 = 3.5
#   delta_1 = 2 + 0.5 * 0 * 99 - 1.0     = 1.0    A_1 = 1.0 + 0.25 * 0 * A_2      = 1.0   (episode ended)
#   delta_0 = 1 + 0.5 * 1.0 - 0.5        = 1.0    A_0 = 1.0 + 0.25 * 1 * 1.0      = 1.25
#   returns = A + V = [1.75, 2.0, 5.0]
#
# World 1 is TRUNCATED (time-out) at t = 1: it bootstraps from V(final_obs) = 3.0 held in next_values[1],
# but the advantage does not flow back across the episode boundary:
#   r = [0, 1, -1], V = [2, 1, 0], next_values = [V_1 = 1.0, V(final_obs) = 3.0, bootstrap 2.0]
#   delta_2 = -1 + 0.5 * 2.0 - 0         = 0.0    A_2 = 0.0
#   delta_1 = 1 + 0.5 * 3.0 - 1          = 1.5    A_1 = 1.5 + 0.25 * 0 * A_2      = 1.5
#   delta_0 = 0 + 0.5 * 1.0 - 2          = -1.5   A_0 = -1.5 + 0.25 * 1 * 1.5     = -1.125
#   returns = A + V = [0.875, 2.5, 0.0]
GAMMA, LAM = 0.5, 0.5
REWARDS = torch.tensor([[1.0, 0.0], [2.0, 1.0], [3.0, -1.0]])
VALUES = torch.tensor([[0.5, 2.0], [1.0, 1.0], [1.5, 0.0]])
NEXT_VALUES = torch.tensor([[1.0, 1.0], [99.0, 3.0], [4.0, 2.0]])
TERMINATED = torch.tensor([[False, False], [True, False], [False, False]])
DONES = torch.tensor([[False, False], [True, True], [False, False]])
EXPECTED_ADV = torch.tensor([[1.25, -1.125], [1.0, 1.5], [3.5, 0.0]])
EXPECTED_RET = torch.tensor([[1.75, 0.875], [2.0, 2.5], [5.0, 0.0]])


def test_gae_matches_hand_computed_termination_and_timeout() -> None:
    adv, ret = gae(REWARDS, VALUES, NEXT_VALUES, TERMINATED, DONES, GAMMA, LAM)
    torch.testing.assert_close(adv, EXPECTED_ADV, rtol=0, atol=1e-6)
    torch.testing.assert_close(ret, EXPECTED_RET, rtol=0, atol=1e-6)


def test_gae_lambda_one_is_discounted_return_minus_value() -> None:
    # One world, no episode end, lam = 1: A_t = sum_k gamma^k r_{t+k} + gamma^(T-t) V_boot - V_t.
    r = torch.tensor([[1.0], [1.0], [1.0]])
    v = torch.tensor([[0.0], [0.0], [0.0]])
    nxt = torch.tensor([[0.0], [0.0], [8.0]])  # values[t + 1] and the bootstrap 8.0
    no = torch.zeros(3, 1, dtype=torch.bool)
    adv, _ = gae(r, v, nxt, no, no, gamma=0.5, lam=1.0)
    # t=2: 1 + 0.5*8 = 5;  t=1: 1 + 0.5*5 = 3.5;  t=0: 1 + 0.5*3.5 = 2.75
    torch.testing.assert_close(adv, torch.tensor([[2.75], [3.5], [5.0]]))


def test_ppo_rollout_bootstraps_timeouts_from_final_obs(monkeypatch: pytest.MonkeyPatch) -> None:
    """``PPO.act/record/compute_returns`` feed GAE the same numbers as the hand-worked case above.

    The critic is replaced by ``V(x) = x[:, 0]`` so every value is chosen by the critic observation.
    """
    model = ActorCritic(2, 1, 1, [4], [4])
    cfg = PPOConfig(num_steps=3, gamma=GAMMA, lam=LAM)
    ppo = PPO(model, cfg, num_envs=2, device=torch.device("cpu"), seed=0)
    monkeypatch.setattr(model.critic_normalizer, "forward", lambda critic_obs: critic_obs)
    monkeypatch.setattr(model, "value_normalized", lambda critic_in: critic_in[:, 0])
    actor_obs = torch.zeros(2, 2)
    final_obs = torch.tensor([[123.0], [3.0]])  # world 0 terminated: its final value must be ignored
    for t in range(3):
        ppo.act(actor_obs, VALUES[t][:, None])
        truncated = DONES[t] & ~TERMINATED[t]
        ppo.record(REWARDS[t], TERMINATED[t], truncated, final_obs if bool(truncated.any()) else None)
    ppo.compute_returns(torch.tensor([[4.0], [2.0]]))  # bootstrap values after the last step
    torch.testing.assert_close(ppo.storage.returns, EXPECTED_RET, rtol=0, atol=1e-6)
    norm = (EXPECTED_ADV - EXPECTED_ADV.mean()) / (EXPECTED_ADV.std() + 1e-8)
    torch.testing.assert_close(ppo.storage.advantages, norm, rtol=0, atol=1e-6)


# --------------------------------------------------------------------------------------------- surrogate
def test_surrogate_loss_clipping_on_hand_numbers() -> None:
    # clip = 0.2; L = -mean(min(rho A, clip(rho, 0.8, 1.2) A)):
    #   rho 1.5, A +2: min(3.0, 1.2 * 2 = 2.4)    = 2.4   clipped: no gradient
    #   rho 0.5, A +2: min(1.0, 0.8 * 2 = 1.6)    = 1.0   unclipped (pessimistic side)
    #   rho 1.5, A -1: min(-1.5, 1.2 * -1 = -1.2) = -1.5  unclipped (pessimistic side)
    #   rho 0.5, A -1: min(-0.5, 0.8 * -1 = -0.8) = -0.8  clipped: no gradient
    #   L = -(2.4 + 1.0 - 1.5 - 0.8) / 4 = -0.275
    ratio = torch.tensor([1.5, 0.5, 1.5, 0.5])
    adv = torch.tensor([2.0, 2.0, -1.0, -1.0])
    old = torch.tensor([0.3, -1.0, 2.0, 0.0])
    log_prob = (old + ratio.log()).requires_grad_(True)
    loss = surrogate_loss(log_prob, old, adv, clip=0.2)
    assert float(loss.detach()) == pytest.approx(-0.275, abs=1e-6)
    loss.backward()
    # dL/dlogp_i = -rho_i A_i / 4 where unclipped, 0 where the clipped term is the minimum.
    assert log_prob.grad is not None
    torch.testing.assert_close(log_prob.grad, torch.tensor([0.0, -0.25, 0.375, 0.0]))


def test_surrogate_loss_is_minus_mean_advantage_at_ratio_one() -> None:
    lp = torch.tensor([-1.0, -2.0, -0.5])
    adv = torch.tensor([1.0, -3.0, 0.5])
    assert float(surrogate_loss(lp, lp, adv, clip=0.2)) == pytest.approx(float(-adv.mean()))


# ------------------------------------------------------------------------------------------------- value
VAL = torch.tensor([1.0, 3.0, 3.0])
OLD_VAL = torch.tensor([0.0, 2.9, 2.0])
RET = torch.tensor([2.0, 0.0, 2.5])


def test_value_loss_unclipped() -> None:
    # (2 - 1)^2 = 1, (0 - 3)^2 = 9, (2.5 - 3)^2 = 0.25 -> mean 10.25 / 3
    assert float(value_loss(VAL, OLD_VAL, RET, None)) == pytest.approx(10.25 / 3, abs=1e-6)


def test_value_loss_clipped() -> None:
    # clip 0.2: clipped values = old + clamp(new - old, -0.2, 0.2) = [0.2, 3.0, 2.2]
    #   sample 0: max((2 - 1)^2 = 1, (2 - 0.2)^2 = 3.24)       = 3.24  (clipping makes it worse: kept)
    #   sample 1: max(9, (0 - 3.0)^2 = 9)                     = 9     (inside the clip: same)
    #   sample 2: max((2.5 - 3)^2 = 0.25, (2.5 - 2.2)^2 = 0.09) = 0.25
    #   mean = 12.49 / 3
    assert float(value_loss(VAL, OLD_VAL, RET, 0.2)) == pytest.approx(12.49 / 3, abs=1e-6)
    # With a huge clip the clipped variant is the plain squared error.
    assert float(value_loss(VAL, OLD_VAL, RET, 1e6)) == pytest.approx(10.25 / 3, abs=1e-5)


# ---------------------------------------------------------------------------------------------------- KL
def test_gaussian_kl_zero_for_identical_distributions() -> None:
    g = torch.Generator().manual_seed(0)
    mu = torch.randn(5, 3, generator=g)
    std = torch.rand(5, 3, generator=g) + 0.1
    assert float(gaussian_kl(mu, std, mu, std)) == pytest.approx(0.0, abs=1e-7)


def test_gaussian_kl_matches_closed_form() -> None:
    # KL(N(0, 1) || N(1, 2^2)) = log(2/1) + (1 + (0 - 1)^2) / (2 * 4) - 1/2 = ln 2 - 0.25 per action.
    mu0, std0 = torch.zeros(1, 2), torch.ones(1, 2)
    mu1, std1 = torch.ones(1, 2), torch.full((1, 2), 2.0)
    assert float(gaussian_kl(mu0, std0, mu1, std1)) == pytest.approx(2 * (math.log(2.0) - 0.25), abs=1e-6)


def test_gaussian_kl_matches_torch_distributions() -> None:
    g = torch.Generator().manual_seed(1)
    mu0, mu1 = torch.randn(7, 4, generator=g), torch.randn(7, 4, generator=g)
    std0, std1 = torch.rand(7, 4, generator=g) + 0.2, torch.rand(7, 4, generator=g) + 0.2
    ref = kl_divergence(Normal(mu0, std0), Normal(mu1, std1)).sum(-1).mean()
    torch.testing.assert_close(gaussian_kl(mu0, std0, mu1, std1), ref)
