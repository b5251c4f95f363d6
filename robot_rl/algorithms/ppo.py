"""Proximal policy optimisation for an asymmetric actor-critic.

The algorithm owns the networks' optimiser and the rollout buffer; the runner owns the environment loop. ``update``
stays short: losses and advantages are the pure functions of :mod:`robot_rl.algorithms.losses`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from policies.nets import ActorCritic
from robot_rl.algorithms.losses import gae, gaussian_kl, surrogate_loss, value_loss
from robot_rl.algorithms.optim import fused
from robot_rl.distributed import SingleProcess
from robot_rl.storage import Batch, RolloutStorage
from sim.typed_config import positive

RANK_SEED_STRIDE = 7919
"""Rank ``r`` draws its action noise (and its env its episodes) from ``seed + RANK_SEED_STRIDE * r``."""


@dataclass
class PPOConfig:
    """Proximal policy optimisation.

    Attributes:
        num_steps: Rollout length per world per iteration ``T``.
        num_epochs: Passes over each rollout.
        num_minibatches: Minibatches per epoch.
        gamma: Discount factor.
        lam: GAE lambda.
        clip_param: PPO ratio clip.
        value_loss_coef: Weight of the value loss.
        value_clip: Clip of the value update (``null``: unclipped).
        entropy_coef: Weight of the entropy bonus.
        learning_rate: Initial Adam learning rate.
        schedule: ``adaptive`` (learning rate follows the KL divergence) or ``fixed``.
        desired_kl: Target KL divergence per update for the adaptive schedule.
        refine_kl: The KL target from the first evaluation that meets the task's success criterion on (``null``:
            ``desired_kl`` throughout). A large target learns fast to the criterion, a small one then keeps improving
            the policy where the large one lets it drift (quadrotor: docs/benchmarks.md, "the KL target").
        plateau_kl: The KL target once the kept policy stops improving after the switch to ``refine_kl``: no better
            selection evaluation in ``runner.plateau_evaluations`` scheduled evaluations (``null``: no such switch).
            A smaller step on the plateau steadies the policy that every evaluation sees (quadrotor at the corners:
            docs/benchmarks.md, "The KL target on the plateau").
        max_learning_rate: Ceiling of the adaptive learning rate (rsl_rl's is 1e-2).
        max_grad_norm: Gradient norm clip.
        min_std: Floor of the policy standard deviation.
        max_std: Ceiling of the policy standard deviation (``null``: none). With actions clipped to ``[-1, 1]`` and
            an entropy bonus, nothing else stops the deviation from growing once the policy is good (hover: from
            0.19 to 4.0 over 600 s of training, docs/benchmarks.md).
        critic_warmup_iterations: The first iterations train the critic alone: the actor's weights, its standard
            deviation and the learning rate are held (its input normaliser goes on counting the rollouts, as in
            every iteration), for a run started from another run's actor with a fresh critic (``--init-from``),
            whose first advantages would otherwise be the new critic's noise (PIRLNav's critic warm-up). 0: none.
    """

    num_steps: int = 16
    num_epochs: int = 5
    num_minibatches: int = 4
    gamma: float = 0.99
    lam: float = 0.95
    clip_param: float = 0.2
    value_loss_coef: float = 1.0
    value_clip: float | None = 0.2
    entropy_coef: float = 0.0
    learning_rate: float = 1e-3
    schedule: Literal["adaptive", "fixed"] = "adaptive"
    desired_kl: float = 0.01
    refine_kl: float | None = None
    plateau_kl: float | None = None
    max_learning_rate: float = 1e-2
    max_grad_norm: float = 1.0
    min_std: float = 0.01
    max_std: float | None = None
    critic_warmup_iterations: int = 0

    def __post_init__(self) -> None:
        for name in ("num_steps", "num_epochs", "num_minibatches"):
            if getattr(self, name) < 1:
                raise ValueError(f"ppo.{name} must be >= 1, got {getattr(self, name)}")
        if self.critic_warmup_iterations < 0:
            raise ValueError(f"ppo.critic_warmup_iterations must be >= 0, got {self.critic_warmup_iterations}")
        if not 0.0 < self.gamma <= 1.0 or not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"ppo.gamma must be in (0, 1] and ppo.lam in [0, 1], got {self.gamma}, {self.lam}")
        for name in ("learning_rate", "clip_param", "desired_kl", "max_learning_rate", "max_grad_norm", "min_std"):
            positive(f"ppo.{name}", getattr(self, name))
        for name in ("value_loss_coef", "entropy_coef"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) >= 0):
                raise ValueError(f"ppo.{name} must be finite and >= 0, got {getattr(self, name)}")
        if self.value_clip is not None:
            positive("ppo.value_clip", self.value_clip)
        for name in ("refine_kl", "plateau_kl"):
            if getattr(self, name) is not None:
                positive(f"ppo.{name}", getattr(self, name))
        if self.max_std is not None:
            positive("ppo.max_std", self.max_std)
            if self.max_std < self.min_std:
                raise ValueError(f"ppo.max_std ({self.max_std}) must be >= ppo.min_std ({self.min_std})")


class TrainingDivergedError(RuntimeError):
    """A loss, gradient, parameter or normaliser statistic became NaN or infinite; training cannot go on."""


@dataclass
class UpdateStats:
    """Means over one update's minibatches, and the on-policy check of its first minibatch.

    ``first_ratio_deviation`` is ``max |pi / pi_old - 1|`` over the first minibatch, before any gradient step:
    exactly 0 for an on-policy update (the rollout's inputs are replayed as they were seen); with ``compile`` the
    rollout and the update are two compiled graphs, so it is 0 up to rounding.
    """

    surrogate: float
    value: float
    entropy: float
    kl: float
    learning_rate: float
    action_std: float
    first_ratio_deviation: float


class PPO:
    """PPO with KL-adaptive learning rate, clipped value loss and gradient clipping.

    Args:
        model: The actor-critic being trained.
        cfg: PPO hyperparameters.
        num_envs: Worlds per rollout ``N``.
        device: Device of model and buffers.
        seed: Seed of the minibatch shuffling.
        dist: This process's role in data-parallel training (default: alone).
        compile: Run the rollout's sampling and the minibatch loss (forward and backward) through ``torch.compile``.
    """

    def __init__(
        self,
        model: ActorCritic,
        cfg: PPOConfig,
        num_envs: int,
        device: torch.device,
        seed: int,
        dist: SingleProcess | None = None,
        compile: bool = False,
    ) -> None:
        self.model = model
        self.cfg = cfg
        self.dist = dist or SingleProcess()
        self.learning_rate = cfg.learning_rate
        self.desired_kl = cfg.desired_kl  # the adaptive schedule's target now (see refine)
        self.refined = False  # whether refine() switched it (a checkpoint keeps this)
        self.settled = False  # whether settle() switched it on the plateau (a checkpoint keeps this)
        # The entropy bonus's weight now (a curriculum may fade it: set_entropy_coef); a tensor, so that a compiled
        # loss reads it as an input instead of compiling anew for each value.
        self._entropy_coef = torch.tensor(cfg.entropy_coef, device=device)
        self.actor_held = False
        """Whether the next :meth:`update` trains the critic alone (the warm-up, ``ppo.critic_warmup_iterations``:
        the runner sets it before each update)."""
        self._actor_weight = torch.tensor(1.0, device=device)  # 0 while the actor is held (a tensor, as above)
        # One fused kernel per step: 3.6x cheaper on 2 CPU threads (docs/benchmarks.md, "a fused Adam step").
        self.optimizer = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate, fused=fused(device))
        a_dim = model.actor_normalizer.mean.numel()
        c_dim = model.critic_normalizer.mean.numel()
        self.storage = RolloutStorage(cfg.num_steps, num_envs, a_dim, c_dim, model.log_std.numel(), device)
        self.gen = torch.Generator(device=device)  # action noise: a stream of its own on every rank
        self.gen.manual_seed(seed + RANK_SEED_STRIDE * self.dist.rank)
        self.shuffle_gen = torch.Generator(device=device)  # minibatch order: the same on every rank
        self.shuffle_gen.manual_seed(seed)
        self._loss_fn = torch.compile(self._minibatch_loss, dynamic=False) if compile else self._minibatch_loss
        self._sample_fn = torch.compile(self._sample, dynamic=False) if compile else self._sample

    def rng_state(self) -> dict[str, torch.Tensor]:
        """States of the sampling and shuffling streams (for an exact resume)."""
        return {"noise": self.gen.get_state(), "shuffle": self.shuffle_gen.get_state()}

    def set_rng_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restore :meth:`rng_state`."""
        self.gen.set_state(state["noise"])
        self.shuffle_gen.set_state(state["shuffle"])

    @torch.no_grad()
    def act(self, actor_obs: torch.Tensor, critic_obs: torch.Tensor) -> torch.Tensor:
        """Sample actions ``[N, A]`` for raw observations and record the step.

        The inputs are stored *normalised*, exactly as the networks saw them, so the update replays the
        rollout's own inputs: before the first gradient step every probability ratio is 1 (on-policy), however
        the normaliser's statistics move during the rollout.
        """
        s, t = self.storage, self.storage.step
        noise = torch.randn(actor_obs.shape[0], s.actions.shape[-1], generator=self.gen, device=self.gen.device)
        step = self._sample_fn(actor_obs, critic_obs, noise)
        buffers = (s.actor_obs, s.critic_obs, s.actions, s.mean, s.std, s.log_prob, s.values)
        for buffer, value in zip(buffers, step, strict=True):
            buffer[t] = value
        return step[2]

    def _sample(
        self, actor_obs: torch.Tensor, critic_obs: torch.Tensor, noise: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """One rollout step's numbers (what ``compile`` compiles), for ``noise`` ``[N, A]`` standard normal.

        Returns:
            ``(actor_in, critic_in, actions, mean, std, log_prob, value)``: the normalised inputs, the sampled
            actions ``[N, A]``, the Gaussian's mean and standard deviation, ``log pi(actions)`` ``[N]`` and the
            normalised value ``[N]``.
        """
        m = self.model
        actor_in, critic_in = m.actor_normalizer(actor_obs), m.critic_normalizer(critic_obs)
        dist = m.distribution_normalized(actor_in)
        actions = dist.mean + dist.stddev * noise
        log_prob = dist.log_prob(actions).sum(-1)
        return actor_in, critic_in, actions, dist.mean, dist.stddev, log_prob, m.value_normalized(critic_in)

    @torch.no_grad()
    def record(
        self,
        rewards: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        final_critic_obs: torch.Tensor | None,
    ) -> None:
        """Store the outcome of the step begun by :meth:`act`.

        ``final_critic_obs`` (``[N, D_c]``, needed when any world was truncated) is the critic input of the last
        state of finished episodes; its value bootstraps time-outs.
        """
        s, t = self.storage, self.storage.step
        s.rewards[t] = rewards
        s.terminated[t] = terminated
        s.dones[t] = terminated | truncated
        if final_critic_obs is not None and bool(truncated.any()):
            s.next_values[t] = torch.where(truncated, self.model.value(final_critic_obs), s.next_values[t])
        s.step += 1

    @torch.no_grad()
    def compute_returns(self, last_critic_obs: torch.Tensor) -> None:
        """Fill advantages and returns once the rollout is complete (bootstrapping from ``last_critic_obs``)."""
        s = self.storage
        nxt = torch.cat((s.values[1:], self.model.value(last_critic_obs)[None]), 0)
        # next_values holds V(final_obs) where a time-out happened; elsewhere use the value of the next state.
        trunc = s.dones & ~s.terminated
        s.next_values = torch.where(trunc, s.next_values, nxt)
        s.advantages, s.returns = gae(
            s.rewards, s.values, s.next_values, s.terminated, s.dones, self.cfg.gamma, self.cfg.lam
        )
        adv = s.advantages  # normalised with the statistics of every rank's advantages
        n = torch.tensor(float(adv.numel()), dtype=torch.float64, device=adv.device)
        n, mean, var = self.dist.merge_moments(n, adv.mean().reshape(1), adv.var(unbiased=False).reshape(1))
        std = (var * (n / (n - 1).clamp_min(1.0))).sqrt()
        s.advantages = (adv - mean) / (std + 1e-8)

    def update(self) -> UpdateStats:
        """Run the PPO epochs over the stored rollout and clear it; while :attr:`actor_held` (the critic's warm-up)
        only the value loss trains and the learning rate is held.

        Raises:
            TrainingDivergedError: A loss, the gradient norm, a parameter or a normaliser statistic is not finite
                (the message names which); the model must then not be saved.
        """
        cfg, model = self.cfg, self.model
        totals = torch.zeros(4)
        count = 0
        first_dev = 0.0
        critic_only = self.actor_held
        self._actor_weight.fill_(0.0 if critic_only else 1.0)
        for b in self.storage.minibatches(cfg.num_minibatches, cfg.num_epochs, self.shuffle_gen):
            loss, parts, ratio_dev = self._loss_fn(b)
            if count == 0:
                first_dev = float(ratio_dev)
            parts = self.dist.mean_(parts)
            _require_finite(parts, ("surrogate loss", "value loss", "entropy", "KL divergence"), count)
            if cfg.schedule == "adaptive" and not critic_only:
                self._adapt_learning_rate(float(parts[3]))  # the global KL: every rank takes the same step
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.dist.average_gradients(model.parameters())
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            _require_finite(grad_norm[None], ("gradient norm",), count)
            self.optimizer.step()
            with torch.no_grad():
                model.log_std.clamp_(
                    min=math.log(cfg.min_std), max=None if cfg.max_std is None else math.log(cfg.max_std)
                )
            totals += parts.cpu()
            count += 1
        if (name := model.first_non_finite()) is not None:
            raise TrainingDivergedError(f"non-finite values in '{name}' after the update")
        self.storage.step = 0
        m = (totals / max(count, 1)).tolist()
        std = float(model.log_std.detach().exp().mean())
        return UpdateStats(m[0], m[1], m[2], m[3], self.learning_rate, std, first_dev)

    def _minibatch_loss(self, b: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """PPO's loss on one minibatch (what ``compile`` compiles).

        Returns:
            ``(loss, parts, ratio_deviation)``: the scalar to minimise; ``[4]`` detached surrogate, value loss,
            entropy and KL; ``max |pi / pi_old - 1|`` over the minibatch.
        """
        cfg, model = self.cfg, self.model
        dist = model.distribution_normalized(b.actor_obs)
        log_prob = dist.log_prob(b.actions).sum(-1)
        ratio_dev = (log_prob.detach() - b.old_log_prob).exp().sub(1.0).abs().max()
        entropy = dist.entropy().sum(-1).mean()
        kl = gaussian_kl(b.old_mean, b.old_std, dist.mean.detach(), dist.stddev.detach())
        surr = surrogate_loss(log_prob, b.old_log_prob, b.advantages, cfg.clip_param)
        v_loss = value_loss(model.value_normalized(b.critic_obs), b.old_values, b.returns, cfg.value_clip)
        loss = self._actor_weight * (surr - self._entropy_coef * entropy) + cfg.value_loss_coef * v_loss
        return loss, torch.stack((surr.detach(), v_loss.detach(), entropy.detach(), kl)), ratio_dev

    def refine(self) -> None:
        """Switch the adaptive schedule to ``refine_kl`` (if set): the policy met its criterion."""
        self.refined = True
        if self.cfg.refine_kl is not None:
            self.desired_kl = self.cfg.refine_kl

    def settle(self) -> None:
        """Switch the adaptive schedule to ``plateau_kl`` (if set): after :meth:`refine`, the kept policy stopped
        improving."""
        self.settled = True
        if self.cfg.plateau_kl is not None:
            self.desired_kl = self.cfg.plateau_kl

    @property
    def entropy_coef(self) -> float:
        """The entropy bonus's weight now (``ppo.entropy_coef`` unless a curriculum changed it)."""
        return float(self._entropy_coef)

    def set_entropy_coef(self, value: float) -> None:
        """Set the entropy bonus's weight from the next update on (:mod:`robot_rl.curriculum`)."""
        self._entropy_coef.fill_(value)

    def set_learning_rate(self, learning_rate: float) -> None:
        """Set the current learning rate (the optimiser's too)."""
        self.learning_rate = learning_rate
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate

    def _adapt_learning_rate(self, kl: float) -> None:
        """rsl_rl's rule: shrink the step when the policy moved too far, grow it when it barely moved."""
        if kl > 2.0 * self.desired_kl:
            self.set_learning_rate(max(1e-5, self.learning_rate / 1.5))
        elif 0.0 < kl < 0.5 * self.desired_kl:
            self.set_learning_rate(min(self.cfg.max_learning_rate, self.learning_rate * 1.5))


def _require_finite(values: torch.Tensor, names: tuple[str, ...], minibatch: int) -> None:
    """Raise :class:`TrainingDivergedError` naming the first non-finite entry of ``values`` (one sync)."""
    finite = torch.isfinite(values)
    if not bool(finite.all()):
        i = int((~finite).nonzero()[0, 0])
        raise TrainingDivergedError(f"non-finite {names[i]} ({float(values[i])}) in minibatch {minibatch + 1}")
