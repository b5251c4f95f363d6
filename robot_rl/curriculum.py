"""Reward curricula: reward terms, and PPO's entropy bonus, whose weight fades to zero once the policy succeeds in
training.

A price that helps a policy find the task can cap it later: in ``panda-lift`` a price on the hand's lean took seed 2
off the grasp plateau it never left without one, and held seed 0 under the bar it meets without it
(docs/benchmarks.md, "Lift: the lean priced on seed 0"). Isaac Lab changes reward weights during training with its
``modify_reward_weight`` curriculum term (at a fixed step count); here the fade starts when the training episodes
first succeed often enough, so it follows each seed's own progress rather than a guessed step count.

An entropy bonus can do the same: Isaac Lab's (``entropy_coef`` 0.006) took ``panda-lift`` off its grasp plateau four
times sooner, then held it under the bar while the policy's action noise grew (docs/benchmarks.md, "Lift: Isaac
Lab's entropy bonus on seed 0"); ``runner.entropy_fade`` fades ``ppo.entropy_coef`` on the same schedule.

Configured by ``runner.reward_fade`` (the terms), ``runner.entropy_fade`` (the entropy bonus too),
``runner.reward_fade_after`` (the share of one iteration's finished training episodes that must succeed) and
``runner.reward_fade_iterations`` (how long the linear fade lasts).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.typed_config import ConfigError


@dataclass
class RewardFade:
    """The state of one run's reward fade.

    Attributes:
        scales: The configured (starting) scale of each fading term, per second (may be empty when only the entropy
            bonus fades).
        after: Training success rate (one iteration's finished episodes, in ``(0, 1]``) that starts the fade.
        iterations: Iterations over which the scales fall linearly to zero.
        start: The iteration after which the fade started (``None``: not yet); kept in checkpoints.
        entropy_coef: The starting weight of PPO's entropy bonus when it fades too (``ppo.entropy_coef``); 0: it
            does not fade.
    """

    scales: dict[str, float]
    after: float
    iterations: int
    start: int | None = None
    entropy_coef: float = 0.0

    def observe(self, iteration: int, success_rate: float | None) -> bool:
        """Start the fade after ``iteration`` if ``success_rate`` (that iteration's training episodes; ``None``
        when none finished) reaches ``after``. Returns whether it starts now."""
        if self.start is not None or success_rate is None or success_rate < self.after:
            return False
        self.start = iteration
        return True

    def factor(self, iteration: int) -> float:
        """Share of the starting scales in force for the iteration after ``iteration``: 1 before the fade; the
        ``k``-th iteration after ``start`` runs at ``1 - k / iterations``, down to 0."""
        if self.start is None:
            return 1.0
        return max(0.0, 1.0 - (iteration + 1 - self.start) / self.iterations)

    def current(self, iteration: int) -> dict[str, float]:
        """Each fading term's scale for the iteration after ``iteration``, per second."""
        f = self.factor(iteration)
        return {name: scale * f for name, scale in self.scales.items()}

    def entropy(self, iteration: int) -> float:
        """The entropy bonus's weight for the iteration after ``iteration`` (``entropy_coef`` times the factor)."""
        return self.entropy_coef * self.factor(iteration)


def reward_fade(
    names: list[str], env_cfg: object, after: float, iterations: int, entropy_coef: float | None = None
) -> RewardFade | None:
    """The fade ``runner.reward_fade`` and ``runner.entropy_fade`` ask for, with each term's starting scale from
    ``env.reward_scales`` (``None``: nothing fades).

    Args:
        names: Reward terms that fade.
        env_cfg: The task's env config (its ``reward_scales``).
        after: Training success rate that starts the fade.
        iterations: Iterations the fade lasts.
        entropy_coef: ``ppo.entropy_coef`` when the entropy bonus fades too; ``None``: it does not.

    Raises:
        ConfigError: The task has no reward scales, or a named term is not one of them or has scale 0; or the
            entropy bonus is to fade from 0.
    """
    if entropy_coef is not None and entropy_coef <= 0:
        raise ConfigError(f"runner.entropy_fade fades ppo.entropy_coef, which is {entropy_coef}: nothing to fade")
    if not names:
        return None if entropy_coef is None else RewardFade({}, after, iterations, entropy_coef=entropy_coef)
    scales = getattr(env_cfg, "reward_scales", None)
    if not isinstance(scales, dict):
        raise ConfigError("runner.reward_fade names reward terms, but this task's env config has no reward_scales")
    for name in names:
        if name not in scales:
            raise ConfigError(f"runner.reward_fade names '{name}', not a reward term of this task: {sorted(scales)}")
        if scales[name] == 0:
            raise ConfigError(
                f"runner.reward_fade names '{name}', whose scale env.reward_scales.{name} is 0: nothing to fade"
            )
    fading = {name: float(scales[name]) for name in names}
    return RewardFade(fading, after, iterations, entropy_coef=entropy_coef or 0.0)
