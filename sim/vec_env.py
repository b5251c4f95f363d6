"""The batched environment contract every simulation backend implements.

A :class:`VecEnv` steps ``num_envs`` independent worlds at once. Everything crossing this boundary is a
``torch.Tensor`` on ``env.device``; backends that simulate elsewhere (MuJoCo in C, for instance) convert exactly once,
here, at the boundary.

Shapes (``N = num_envs``, ``A = num_actions``)::

    reset(seed)   -> obs                                  obs[group]: [N, D_group] float32
    step(actions) -> obs, reward, terminated, truncated, info
                     actions: [N, A] float32 in [-1, 1] (normalised; the task scales them)
                     reward: [N] float32, terminated/truncated: [N] bool

Finished worlds are reset automatically inside ``step``: the returned ``obs`` is already the first observation of
the next episode, and ``info["final_obs"]`` holds the last observation of the finished one (needed to bootstrap the
value of time-outs). ``terminated`` (crash, goal reached) is kept apart from ``truncated`` (time limit) so returns
bootstrap correctly. ``info["log"]`` maps names to per-env float tensors ``[N]`` (reward terms, metrics) and
``info["success"]`` (bool ``[N]``, valid where ``terminated | truncated``) exists where the task has a criterion.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from policies.runtime.contract import Contract


class TaskConfigError(ValueError):
    """A task's configuration names something the task does not have, or a value it cannot use."""


Obs = dict[str, torch.Tensor]
"""Named observation groups: ``"policy"`` (onboard sensors), ``"critic"`` (privileged), later ``"image"`` etc."""


@dataclass
class StepInfo:
    """What ``step`` reports beside observations and rewards (all tensors are ``[N]`` unless noted).

    Attributes:
        log: Per-env scalars to average into the training log (reward terms, errors in SI units).
        final_obs: Observation groups of the step that ended an episode (rows of unfinished envs are
            the same as ``obs``); used to bootstrap time-outs.
        success: Per-env success flag of the episode that just ended (only meaningful where done).
        episode_return: Undiscounted return of the episode that just ended (only meaningful where done).
        episode_length: Length in control steps of the episode that just ended.
        episode_metrics: Task-specific per-episode figures of the episodes that just ended (only meaningful
            where done), e.g. the quadrotor's mean tail position error.
    """

    log: dict[str, torch.Tensor] = field(default_factory=dict)
    final_obs: Obs = field(default_factory=dict)
    success: torch.Tensor | None = None
    episode_return: torch.Tensor | None = None
    episode_length: torch.Tensor | None = None
    episode_metrics: dict[str, torch.Tensor] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        """Dict-style access (``info["log"]``) as the design document spells it."""
        return getattr(self, key)


class VecEnv(abc.ABC):
    """Batched environment: ``num_envs`` worlds stepped together on one ``device``.

    Attributes:
        num_envs: Number of parallel worlds ``N``.
        num_actions: Size ``A`` of each world's (normalised) action.
        obs_sizes: Size of each observation group, ``{"policy": D_p, "critic": D_c, ...}``.
        dt: Control period in seconds (one ``step``).
        max_episode_length: Episode time limit in control steps (``truncated`` when reached).
        device: Torch device of every tensor crossing the interface.
    """

    num_envs: int
    num_actions: int
    obs_sizes: dict[str, int]
    dt: float
    max_episode_length: int
    device: torch.device

    @abc.abstractmethod
    def reset(self, seed: int | None = None) -> Obs:
        """Reset every world; with ``seed``, re-seed the env's random stream first (same seed, same trajectory)."""

    @abc.abstractmethod
    def step(self, actions: torch.Tensor) -> tuple[Obs, torch.Tensor, torch.Tensor, torch.Tensor, StepInfo]:
        """Advance every world by one control period ``dt`` and auto-reset the finished ones.

        Args:
            actions: ``[N, A]`` normalised actions; values outside ``[-1, 1]`` are clipped by the task.

        Returns:
            ``(obs, reward [N], terminated [N] bool, truncated [N] bool, info)``.
        """

    def spread_episode_starts(self) -> None:  # noqa: B027 - optional hook
        """Start worlds at random points of their first episode so time-outs do not all fall on one step.

        Optional: training calls it once after the first reset; the default does nothing.
        """

    success_bar: float = 0.95
    """Success rate the default :meth:`criterion` asks for."""
    median_figures: tuple[tuple[str, str], ...] = ()
    """Figures the default :meth:`criterion` reports: ``(figure name with its unit, the episode metric whose median
    it is)`` pairs, e.g. ``(("final_height_m", "final_height"),)``."""

    @classmethod
    def criterion(cls, episodes: dict[str, np.ndarray]) -> tuple[bool, dict[str, float]]:
        """Whether a set of evaluation episodes meets the task's success criterion, with the figures behind it.

        Args:
            episodes: Per-episode arrays ``[E]``: ``success``, ``return``, ``length`` and the task's
                ``episode_metrics``.

        Returns:
            ``(met, figures)``; the default criterion is a success rate of at least :attr:`success_bar`, with the
            medians of the :attr:`median_figures` beside it.
        """
        rate = float(np.mean(episodes["success"]))
        medians = {name: float(np.median(episodes[key])) for name, key in cls.median_figures}
        return rate >= cls.success_bar, {"success_rate": rate, **medians}

    @classmethod
    def quality(cls, episodes: dict[str, np.ndarray]) -> tuple[bool, float]:
        """Whether evaluation episodes meet the task's *deployment quality* bar, and a score to rank checkpoints by.

        The success criterion says a policy learned the task; the quality bar says it is fit to deploy (a task may
        make it stricter: the quadrotor's asks for tighter tails and fewer crashes). Training can stop on it
        (``runner.stop_on_quality``) and keeps the checkpoint with the best score (``best.pt``).

        Args:
            episodes: As :meth:`criterion`.

        Returns:
            ``(met, score)``; higher scores are better. The default: the success criterion, scored by success rate.
        """
        met, _ = cls.criterion(episodes)
        return met, float(np.mean(episodes["success"]))

    def contract(self, actor_groups: list[str]) -> Contract:
        """Deployment contract of a policy that reads ``actor_groups`` (observation terms in order, action mapping).

        Raises:
            ContractError: A group is not built from robot signals (privileged groups cannot be deployed).
        """
        raise NotImplementedError(f"{type(self).__name__} does not define a deployment contract")

    def measurements(self, world: int = 0) -> list[Any]:
        """What the robot's drivers would publish for ``world`` (:mod:`sim.measurements` records, in publishing
        order), for a simulated robot on ROS 2.

        Raises:
            NotImplementedError: The env does not stand in for a robot.
        """
        raise NotImplementedError(f"{type(self).__name__} reports no measurements for a simulated robot")

    @property
    def instructions(self) -> list[str]:
        """The language instructions the task gives its worlds (empty: a task without language)."""
        return []

    def instruction_ids(self) -> torch.Tensor | None:
        """Index into :attr:`instructions` of each world's current instruction ``[N]`` (long); ``None`` for a task
        without language."""
        return None

    def compile(self) -> None:  # noqa: B027 - optional hook
        """Run the env's hot path (its physics step) through ``torch.compile`` from the next step on.

        Optional: envs whose physics is not torch code (MuJoCo, PyBullet) keep the default, which does nothing.
        """

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release simulator resources (thread pools, GPU memory)."""

    @property
    def randomization_enabled(self) -> bool:
        """Whether domain randomisation is applied (evaluation switches it off to measure the nominal robot)."""
        return True

    def set_randomization(self, enabled: bool) -> None:
        """Switch domain randomisation and sensor noise on or off (from the next reset).

        Raises:
            TaskConfigError: The env cannot switch randomisation off (the default for envs without any).
        """
        if not enabled:
            raise TaskConfigError(f"{type(self).__name__} cannot switch randomisation off")
