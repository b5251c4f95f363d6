"""Reward curricula: reward terms whose scale fades to zero once the policy succeeds in training.

A price that helps a policy find the task can cap it later: in ``panda-lift`` a price on the hand's lean took seed 2
off the grasp plateau it never left without one, and held seed 0 under the bar it meets without it
(docs/benchmarks.md, "Lift: the lean priced on seed 0"). Isaac Lab changes reward weights during training with its
``modify_reward_weight`` curriculum term (at a fixed step count); here the fade starts when the training episodes
first succeed often enough, so it follows each seed's own progress rather than a guessed step count.

Configured by ``runner.reward_fade`` (the terms), ``runner.reward_fade_after`` (the share of one iteration's finished
training episodes that must succeed) and ``runner.reward_fade_iterations`` (how long the linear fade lasts).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.typed_config import ConfigError


@dataclass
class RewardFade:
    """The state of one run's reward fade.

    Attributes:
        scales: The configured (starting) scale of each fading term, per second.
        after: Training success rate (one iteration's finished episodes, in ``(0, 1]``) that starts the fade.
        iterations: Iterations over which the scales fall linearly to zero.
        start: The iteration after which the fade started (``None``: not yet); kept in checkpoints.
    """

    scales: dict[str, float]
    after: float
    iterations: int
    start: int | None = None

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


def reward_fade(names: list[str], env_cfg: object, after: float, iterations: int) -> RewardFade | None:
    """The fade ``runner.reward_fade`` asks for, with each term's starting scale from ``env.reward_scales``
    (``None``: no term fades).

    Raises:
        ConfigError: The task has no reward scales, or a named term is not one of them or has scale 0.
    """
    if not names:
        return None
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
    return RewardFade({name: float(scales[name]) for name in names}, after, iterations)
