"""Shared machinery of every task: episodes, auto-reset, action latency, sensor noise, randomisation, rewards.

A task subclasses :class:`BatchedTask` and supplies the physics and the task logic through a handful of hooks
(``_simulate``, ``_reset_worlds``, ``_signals``, ``_privileged``, ``_reward_terms``, ``_terminated``, ``_success``).
Everything else — the order of operations inside ``step``, time-outs kept apart from terminations, the final
observation of finished episodes, latency buffers, per-episode sensor bias, logging — lives here once.

State lives in inference tensors: ``reset`` and ``step`` run under ``torch.inference_mode()``, so nothing the
simulator computes is ever tracked by autograd; code that edits task state directly must do so in that mode too.

Order of one ``step`` (control period ``dt``)::

    a_k = _filter_action(clip(actions, -1, 1))      # what the policy asked for (through a deploy-side filter)
    c_k = _transmit(a_k)                            # what leaves for the robot now (default: a_k itself)
    c_applied = c_{k - latency}                     # per-world transport latency, in control steps
    _simulate(c_applied)                            # physics advances by dt
    reward = sum_i scale_i * term_i * dt            # named reward terms, scales from config
    terminated, truncated = _terminated(), step >= max_episode_length
    obs = observe()                                 # noisy onboard signals -> ObservationBuilder, privileged state
    finished worlds: final_obs saved, success recorded, world reset, obs refreshed
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch

from policies.runtime.contract import MIN_CONTROL_PERIOD_S, ActionSpec, Contract, ContractError, ObservationTerm
from policies.runtime.observation import ObservationBuilder
from sim.randomization import (
    DomainRandomizer,
    ParamSpec,
    RandomizationError,
    RandomizationTerm,
    combine,
    sample_bounds,
    validate_term,
)
from sim.vec_env import Obs, StepInfo, TaskConfigError, VecEnv

CALIBRATED_VIEW = "calibrated"
"""Observation group of :meth:`BatchedTask.add_calibrated_view`: the ``policy`` layout without chosen sensor biases."""

MAX_LATENCY = 4
"""Largest action latency the tasks' buffers hold, control steps."""
LATENCY_SPEC = ParamSpec(nominal=(0.0,), lower=-1e-9, unit="control steps")
"""Action latency is randomisable in every task: the value is floored, so ``add`` over ``[0, 2)`` gives 0 or 1
control steps with equal probability."""


@dataclass(frozen=True)
class EnvVariant:
    """A task config changed in one respect, for an evaluation beside the trained setting.

    Attributes:
        cfg: The changed task config (the task's own config class).
        words: What changed, for summaries: ``measured command delay 0-12 ms, no whole periods``.
        key: The same as a key of ``eval.yaml`` (letters, digits and ``_``): ``measured_delay``.
    """

    cfg: Any
    words: str
    key: str


@dataclass
class SensorNoise:
    """Onboard sensor noise, applied while randomisation is on.

    Attributes:
        std: Per-signal white-noise standard deviation (signal units), redrawn every control step.
        bias_std: Per-signal standard deviation of a constant offset drawn at every episode start.
    """

    std: dict[str, float] = field(default_factory=dict)
    bias_std: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for what in ("std", "bias_std"):
            for name, value in getattr(self, what).items():
                if not (math.isfinite(value) and value >= 0):
                    raise TaskConfigError(f"noise.{what}.{name} must be finite and >= 0, got {value}")


def at_control_period(cfg: Any, period_s: float) -> Any:
    """A copy of the task config ``cfg`` (a dataclass with ``dt``) whose control loop runs every ``period_s`` s.

    The physics step never grows: a task with ``substeps`` takes ``ceil(period_s / (dt / substeps))`` of them per
    control period; a task with ``physics_dt`` keeps it, and ``period_s`` must be a whole multiple of it. Rewards
    are per second and episode lengths in seconds, so both carry over. Action latency stays in control periods
    (a loop's latency is about one of its periods).

    Raises:
        TaskConfigError: ``period_s`` is not a number in ``[MIN_CONTROL_PERIOD_S, episode length]``, or not a whole
            multiple of ``physics_dt``.
    """
    if not (isinstance(period_s, int | float) and math.isfinite(period_s) and period_s > 0):
        raise TaskConfigError(f"the control period must be a positive number of seconds, got {period_s!r}")
    longest = getattr(cfg, "episode_length_s", math.inf)
    if not MIN_CONTROL_PERIOD_S <= period_s <= longest:
        raise TaskConfigError(
            f"the control period must be within [{MIN_CONTROL_PERIOD_S:g}, {longest:g}] s (10 kHz to one episode), "
            f"got {period_s:g} s"
        )
    names = {f.name for f in fields(cfg)}
    if "physics_dt" in names:  # the config's own check refuses a period that is not a whole multiple
        return replace(cfg, dt=float(period_s))
    if "substeps" in names:
        step = cfg.dt / cfg.substeps
        return replace(cfg, dt=float(period_s), substeps=max(1, math.ceil(period_s / step - 1e-9)))
    raise TaskConfigError(f"{type(cfg).__name__} has no physics step (substeps or physics_dt) to keep")


def check_fields(obj: object, names: Sequence[str], prefix: str, positive: bool = True) -> None:
    """Every named field of ``obj`` is finite (and ``> 0`` with ``positive``); raise naming ``prefix.field``.

    NaN compares false with everything, so ``not value > 0`` refuses it as well.
    """
    for name in names:
        value = getattr(obj, name)
        for v in value if isinstance(value, tuple | list) else (value,):
            if not math.isfinite(v) or (positive and not v > 0):
                need = "finite and positive" if positive else "finite"
                raise TaskConfigError(f"{prefix}{name} must be {need}, got {value}")


def check_reward_scales(scales: dict[str, float]) -> None:
    """Reward scales are finite (a NaN or infinite scale would turn every return into NaN)."""
    for name, value in scales.items():
        if not math.isfinite(value):
            raise TaskConfigError(f"reward_scales.{name} must be finite, got {value}")


def check_randomization(
    terms: Sequence[RandomizationTerm], specs: dict[str, ParamSpec], max_latency: int = MAX_LATENCY
) -> None:
    """Validate randomisation terms against a task's parameters (``action_latency`` included), at config load.

    Raises:
        RandomizationError: Naming the term, the parameter and what is wrong.
    """
    all_specs = {**specs, "action_latency": LATENCY_SPEC}
    for i, term in enumerate(terms):
        validate_term(term, all_specs, where=f"randomization[{i}]")
        if term.param == "action_latency":
            _lo, hi = sample_bounds(term)
            top = combine(term.operation, torch.zeros(1, 1), torch.tensor([[hi]]))
            if float(top) >= max_latency + 1:
                raise RandomizationError(
                    f"randomization[{i}] (action_latency) can reach {float(top):g} control steps, but at most "
                    f"{max_latency} (values below {max_latency + 1}) are supported"
                )


def value_bounds(
    terms: Sequence[RandomizationTerm], specs: dict[str, ParamSpec], name: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Smallest and largest value ``[size]`` parameter ``name`` can take under ``terms`` (nominal included).

    Used to check physical feasibility over the whole randomisation range (every corner), e.g. that a
    multirotor can still hover with its lightest thrust and heaviest disturbance.
    """
    nominal = torch.tensor(specs[name].nominal, dtype=torch.float64)
    lo, hi = nominal.clone(), nominal.clone()
    for term in terms:
        if term.param != name:
            continue
        a, b = sample_bounds(term)
        ends = combine(term.operation, nominal.expand(2, -1), torch.tensor([[a], [b]], dtype=torch.float64))
        lo, hi = torch.minimum(lo, ends.min(0).values), torch.maximum(hi, ends.max(0).values)
    return lo, hi


class BatchedTask(VecEnv):
    """Base class of the built-in tasks (see the module docstring for the step order).

    Args:
        num_envs: Number of worlds ``N``.
        num_actions: Action size ``A``.
        dt: Control period, seconds.
        episode_length_s: Time limit, seconds.
        device: Torch device of all state.
        seed: Seed of the env's random stream.
        policy_terms: Observation terms of the onboard ``policy`` group (also the deployment contract's).
        privileged_size: Size of the ``critic`` group.
        param_specs: Randomisable physical parameters of the task (``action_latency`` is added here).
        randomization: Randomisation terms from the config.
        noise: Sensor noise model.
        reward_scales: Scale of each named reward term (terms with scale 0 are skipped).
        max_latency: Largest action latency the buffer holds, control steps.
        transmit_size: Width of each queued command when it differs from ``num_actions``.
        corner_share: Share of training resets drawn at the corners of the randomisation
            (:class:`sim.randomization.DomainRandomizer`).
    """

    def __init__(
        self,
        *,
        num_envs: int,
        num_actions: int,
        dt: float,
        episode_length_s: float,
        device: torch.device,
        seed: int,
        policy_terms: Sequence[ObservationTerm],
        privileged_size: int,
        param_specs: dict[str, ParamSpec],
        randomization: Sequence[RandomizationTerm],
        noise: SensorNoise,
        reward_scales: dict[str, float],
        max_latency: int = MAX_LATENCY,
        transmit_size: int | None = None,
        corner_share: float = 0.0,
    ) -> None:
        if not episode_length_s >= dt:  # NaN-safe: an episode shorter than one control period never runs
            raise TaskConfigError(
                f"env.episode_length_s ({episode_length_s:g} s) must be at least one control period env.dt ({dt:g} s)"
            )
        self.num_envs = num_envs
        self.num_actions = num_actions
        self.dt = dt
        self.max_episode_length = max(1, round(episode_length_s / dt))
        self.device = device
        self.policy_terms = list(policy_terms)
        self.obs_sizes = {"policy": sum(t.dim for t in policy_terms), "critic": privileged_size}
        self.gen = torch.Generator(device=device)
        self.gen.manual_seed(seed)
        check_randomization(randomization, param_specs, max_latency)
        self.randomizer = DomainRandomizer(
            randomization, {**param_specs, "action_latency": LATENCY_SPEC}, num_envs, dt, device, corner_share
        )
        self.params = self.randomizer.values
        self.noise = noise
        self._check_names("reward_scales", reward_scales, self.reward_names())
        self.reward_scales = {k: v for k, v in reward_scales.items() if v != 0.0}
        signal_names = [t.source for t in policy_terms]
        self._check_names("noise.std", noise.std, signal_names)
        self._check_names("noise.bias_std", noise.bias_std, signal_names)
        self.max_latency = max_latency
        self.builder = ObservationBuilder(self.policy_terms, num_envs, torch, device, dt=dt)
        n, a = num_envs, num_actions
        self.episode_step = torch.zeros(n, dtype=torch.long, device=device)
        self.episode_return = torch.zeros(n, device=device)
        self.last_action = torch.zeros(n, a, device=device)
        self.action_queue = torch.zeros(n, max_latency + 1, transmit_size or a, device=device)
        self.obs_bias = {k: torch.zeros(n, self._signal_size(k), device=device) for k in noise.bias_std}
        self.last_signals: dict[str, torch.Tensor] = {}
        """The onboard signals of the latest observation, noise and bias included (what the robot's sensors
        reported), by contract source name ``[N, k]``: a simulated robot publishes these as its sensor messages."""
        self._all = torch.ones(n, dtype=torch.bool, device=device)
        self._rows = torch.arange(n, device=device)
        self._obs: Obs = {}
        self._calibrated: tuple[set[str], ObservationBuilder] | None = None
        self._task_view: tuple[str, ObservationBuilder] | None = None

    def set_reward_scale(self, name: str, scale: float) -> None:
        """Scale reward term ``name`` by ``scale`` (per second) from the next step on: a training curriculum's hook
        (:mod:`robot_rl.curriculum`); 0 drops the term.

        Raises:
            TaskConfigError: ``name`` is not one of :meth:`reward_names`, or ``scale`` is not finite.
        """
        if name not in self.reward_names():
            raise TaskConfigError(f"'{name}' is not a reward term of this task: {self.reward_names()}")
        check_reward_scales({name: scale})
        if scale == 0.0:
            self.reward_scales.pop(name, None)
        else:
            self.reward_scales[name] = float(scale)

    # ------------------------------------------------------------------------------------------------ hooks
    def reward_names(self) -> list[str]:
        """Names of the task's reward terms (keys of ``reward_scales``); called before the subclass is set up,
        so it must return a constant list."""
        raise NotImplementedError

    def _simulate(self, action: torch.Tensor) -> None:
        """Advance the physics by ``dt`` under the applied normalised action ``[N, A]``."""
        raise NotImplementedError

    def _reset_worlds(self, mask: torch.Tensor) -> None:
        """Draw new initial states for the worlds in ``mask`` (bool ``[N]``); parameters are already drawn."""
        raise NotImplementedError

    def _signals(self) -> dict[str, torch.Tensor]:
        """Noise-free onboard signals ``{source: [N, size]}`` named as in the policy terms."""
        raise NotImplementedError

    def _privileged(self) -> torch.Tensor:
        """Critic observation ``[N, privileged_size]``: noise-free state, parameters, disturbances."""
        raise NotImplementedError

    def _reward_terms(self, action: torch.Tensor, terminated: torch.Tensor) -> dict[str, torch.Tensor]:
        """Unscaled per-world reward rates ``{name: [N]}`` after the physics step.

        Each term is a rate (per second): the env multiplies it by ``scale * dt``. A one-off event such as a crash
        is expressed as ``indicator / dt`` so its scale is the reward per event (see :func:`sim.rewards.event`).

        Args:
            action: ``[N, A]`` normalised action of this step.
            terminated: ``[N]`` bool, worlds whose episode ends by failure or success at this step.
        """
        raise NotImplementedError

    def _terminated(self) -> torch.Tensor:
        """Bool ``[N]``: the episode ended by failure or completion (not by the time limit)."""
        raise NotImplementedError

    def _success(self) -> torch.Tensor:
        """Bool ``[N]``: whether the current episode meets the task's success criterion (read when it ends)."""
        raise NotImplementedError

    def _episode_metrics(self) -> dict[str, torch.Tensor]:
        """Optional per-world figures of the episode ending now ``{name: [N]}`` (read only where done)."""
        return {}

    def _metrics(self) -> dict[str, torch.Tensor]:
        """Optional extra per-world metrics ``{name: [N]}`` for the log (errors in SI units)."""
        return {}

    def _transmit(self, action: torch.Tensor) -> torch.Tensor:
        """What leaves the controller for the robot when action ``[N, A]`` is computed, ``[N, C]`` (``C`` =
        ``transmit_size``); after the world's latency it reaches :meth:`_simulate`. Default: the normalised action.
        A robot that holds absolute set-points computed from what it measured at command time (the Panda's relative
        joint targets) transmits those set-points, so a late command is applied as it was computed."""
        return action

    def _transmit_idle(self, mask: torch.Tensor) -> torch.Tensor | float:
        """What the latency queue of just-reset worlds ``mask`` holds (default 0: the zero action)."""
        return 0.0

    def _filter_action(self, action: torch.Tensor) -> torch.Tensor:
        """What a filter between the policy and the robot (the energy tank) sends on, as normalised actions ``[N, A]``;
        applied where the deploy node applies it: to the newest action, before the transport latency."""
        return action

    def _filter_metrics(self) -> dict[str, torch.Tensor]:
        """Per-world figures ``{name: [N]}`` of a filter between the policy and the actuators (the energy tank), logged
        as ``metric/tank_<name>``."""
        return {}

    def _filter_episode_metrics(self) -> dict[str, torch.Tensor]:
        """Per-world figures of that filter for the episode ending now ``{name: [N]}`` (read only where done)."""
        return {}

    def action_spec(self) -> ActionSpec:
        """How normalised actions map to robot commands (for the deployment contract)."""
        raise NotImplementedError

    def contract_extra(self) -> dict[str, object]:
        """Task-specific facts written into the contract's ``extra``."""
        return {}

    def default_pose(self) -> list[float]:
        """Joint positions the robot starts from, in command order (empty for robots without joints)."""
        return []

    def evaluation_mode(self) -> None:
        """This env evaluates a policy (``robot_rl.evaluate.make_eval_env``): a task with a training curriculum
        switches it off and evaluates over its whole range (rough terrain: every row). Randomised parameters are drawn
        from their ranges, none pushed to the corners (``corner_share`` 0) from the next reset on."""
        self.randomizer.corner_share = 0.0

    def filter_defaults(self) -> dict[str, Any]:
        """Defaults for the passivity filter and safety layer, written into the contract's ``filter`` section."""
        return {}

    def measured_latency(self) -> EnvVariant | None:
        """This env's config with the latency measured on the robot's deploy path in place of the one training draws,
        for the evaluation a user needs beside the trained one (``robot_rl.runs.PPORun.evaluate``); ``None`` where
        the task has no such measurement or already trains with it. Default: ``None``."""
        return None

    # ---------------------------------------------------------------------------------------- VecEnv API
    @property
    def randomization_enabled(self) -> bool:
        """Whether randomisation and sensor noise are on."""
        return self.randomizer.enabled

    def set_randomization(self, enabled: bool) -> None:
        """Switch randomisation and sensor noise on or off (takes effect at the next reset)."""
        self.randomizer.enabled = enabled

    @torch.inference_mode()
    def reset(self, seed: int | None = None) -> Obs:
        """Reset every world (re-seeding first when ``seed`` is given) and return the first observation."""
        if seed is not None:
            self.gen.manual_seed(seed)
        self.randomizer.apply(self._all, "startup", self.gen)
        self._reset(self._all)
        self._obs = self._observe(refresh=self._all)  # histories restart: nothing leaks from before the reset
        return self._obs

    @torch.inference_mode()
    def spread_episode_starts(self) -> None:
        """Start worlds at random points of their first episode so time-outs do not all fall on one step."""
        self.episode_step = torch.randint(
            0, self.max_episode_length, (self.num_envs,), generator=self.gen, device=self.device
        )

    @torch.inference_mode()
    def step(self, actions: torch.Tensor) -> tuple[Obs, torch.Tensor, torch.Tensor, torch.Tensor, StepInfo]:
        """Advance all worlds by ``dt``; see the module docstring for the order of operations."""
        if actions.shape != (self.num_envs, self.num_actions):
            raise ValueError(f"actions must have shape {(self.num_envs, self.num_actions)}, got {tuple(actions.shape)}")
        action = self._filter_action(actions.to(self.device, torch.float32).clamp(-1.0, 1.0))
        self.action_queue = torch.roll(self.action_queue, 1, 1)
        self.action_queue[:, 0] = self._transmit(action)
        latency = self.params["action_latency"][:, 0].floor().long().clamp(0, self.max_latency)
        self._simulate(self.action_queue[self._rows, latency])
        self.episode_step += 1
        self.randomizer.apply(self._all, "interval", self.gen, step=self.episode_step)

        terminated = self._terminated()
        terms = self._reward_terms(action, terminated)
        reward = torch.zeros(self.num_envs, device=self.device)
        log: dict[str, torch.Tensor] = {}
        for name, scale in self.reward_scales.items():
            value = terms[name] * (scale * self.dt)
            reward += value
            log[f"reward/{name}"] = value
        log.update({f"metric/{k}": v for k, v in self._metrics().items()})
        log.update({f"metric/tank_{k}": v for k, v in self._filter_metrics().items()})
        self.episode_return += reward
        self.last_action = action

        truncated = (self.episode_step >= self.max_episode_length) & ~terminated
        done = terminated | truncated
        obs = self._observe()
        info = StepInfo(log=log, final_obs=obs)
        if bool(done.any()):
            info.final_obs = {k: v.clone() for k, v in obs.items()}
            info.success = self._success() & done
            info.episode_return = self.episode_return.clone()
            info.episode_length = self.episode_step.clone()
            ends = {**self._episode_metrics(), **self._filter_episode_metrics()}
            info.episode_metrics = {k: v.clone() for k, v in ends.items()}
            self._reset(done)
            obs = self._observe(refresh=done)
        self._obs = obs
        return obs, reward, terminated, truncated, info

    # ------------------------------------------------------------------------------------ exact continuation
    @torch.inference_mode()
    def state_dict(self) -> dict[str, Any]:
        """Everything that decides the next steps (copies): random stream, episode counters, latency queue,
        randomised parameters, sensor biases, observation histories, the last observation and the task's physics.

        Restoring it into a freshly built env of the same task, config and ``num_envs`` continues bit for bit.
        """
        return {
            "gen": self.gen.get_state(),
            "randomization_enabled": self.randomizer.enabled,
            "episode_step": self.episode_step.clone(),
            "episode_return": self.episode_return.clone(),
            "last_action": self.last_action.clone(),
            "action_queue": self.action_queue.clone(),
            "params": {k: v.clone() for k, v in self.params.items()},
            "obs_bias": {k: v.clone() for k, v in self.obs_bias.items()},
            "builder": self.builder.state_dict(),
            "obs": {k: v.clone() for k, v in self._obs.items()},
            "task": self._task_state(),
        }

    @torch.inference_mode()
    def load_state_dict(self, state: dict[str, Any]) -> Obs:
        """Restore :meth:`state_dict` and return the observation the env was at (instead of ``reset``)."""
        self.gen.set_state(state["gen"])
        self.randomizer.enabled = state["randomization_enabled"]
        for name in ("episode_step", "episode_return", "last_action", "action_queue"):
            getattr(self, name).copy_(state[name])
        for group in ("params", "obs_bias"):
            for k, v in getattr(self, group).items():
                v.copy_(state[group][k])
        self.builder.load_state_dict(state["builder"])
        self._obs = {k: v.clone() for k, v in state["obs"].items()}
        self._load_task_state(state["task"])
        return self._obs

    def _task_state(self) -> dict[str, torch.Tensor]:
        """The task's own state beyond the base class (physics, accumulators), as tensors (copies)."""
        raise NotImplementedError(f"{type(self).__name__} cannot save its state")

    def _load_task_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restore :meth:`_task_state` (called under inference mode)."""
        raise NotImplementedError(f"{type(self).__name__} cannot restore its state")

    # ------------------------------------------------------------------------------------------- internals
    def _reset(self, mask: torch.Tensor) -> None:
        self.randomizer.apply(mask, "reset", self.gen)
        self._reset_worlds(mask)
        self.episode_step[mask] = 0
        self.episode_return[mask] = 0.0
        self.last_action[mask] = 0.0
        self.action_queue[mask] = self._transmit_idle(mask)
        for name, bias in self.obs_bias.items():
            std = self.noise.bias_std[name] if self.randomizer.enabled else 0.0
            bias[mask] = std * torch.randn(bias[mask].shape, generator=self.gen, device=self.device)

    def _observe(self, refresh: torch.Tensor | None = None) -> Obs:
        """Build all observation groups; ``refresh`` marks just-reset worlds whose history restarts now."""
        signals = self._signals()
        if self.randomizer.enabled:
            for name, std in self.noise.std.items():
                x = signals[name]
                signals[name] = x + std * torch.randn(x.shape, generator=self.gen, device=self.device)
        unbiased = dict(signals) if self._calibrated is not None else signals  # only a calibrated view reads it
        for name, bias in self.obs_bias.items():
            signals[name] = signals[name] + bias
        self.last_signals = signals
        obs = {"policy": self._build(self.builder, signals, refresh), "critic": self._privileged()}
        if self._calibrated is not None:
            names, builder = self._calibrated
            view = {k: unbiased[k] if k in names else v for k, v in signals.items()}
            obs[CALIBRATED_VIEW] = self._build(builder, view, refresh)
        if self._task_view is not None:
            task, builder = self._task_view
            obs[task] = self._build(builder, self._task_view_signals(task, signals), refresh)
        return obs

    @staticmethod
    def _build(
        builder: ObservationBuilder, signals: dict[str, torch.Tensor], refresh: torch.Tensor | None
    ) -> torch.Tensor:
        if refresh is None:
            return builder(signals)
        builder.reset(refresh, signals)
        return builder.read()

    def add_calibrated_view(self, signals: Sequence[str]) -> None:
        """Also observe group :data:`CALIBRATED_VIEW` from the next reset on: the ``policy`` layout, noise and delay
        included, without the per-episode bias of ``signals`` (a calibrated sensor; e.g. a student that sees the
        cube through a calibrated camera while its teacher acted on the biased estimate).

        Raises:
            TaskConfigError: A name is not a signal with a per-episode bias (``noise.bias_std``).
        """
        unknown = sorted(set(signals) - set(self.noise.bias_std))
        if unknown:
            have = ", ".join(sorted(self.noise.bias_std)) or "none"
            raise TaskConfigError(
                f"{self.task_name}: {unknown} carry no per-episode bias to leave out (signals with one: {have})"
            )
        builder = ObservationBuilder(self.policy_terms, self.num_envs, torch, self.device, dt=self.dt)
        self._calibrated = (set(signals), builder)

    task_views: tuple[str, ...] = ()
    """Other tasks whose onboard observation this task can also give (:meth:`add_task_view`), so that a policy
    trained on one of them acts in this task's worlds: e.g. a ``panda-lift`` teacher records demonstrations in
    ``panda-multitask`` (``robot-rl collect``)."""

    def add_task_view(self, task: str) -> list[ObservationTerm]:
        """Also observe group ``task`` from the next reset on: task ``task``'s ``policy`` layout, read from this
        task's signals (noise, bias and delays included) by :meth:`_task_view_signals`; its size joins
        :attr:`obs_sizes` under that name. Returns the group's terms.

        Raises:
            TaskConfigError: This task (in this config) gives no view of ``task``; the message names the ones it
                gives.
        """
        if task not in self.task_views:
            have = ", ".join(self.task_views) or "none"
            raise TaskConfigError(f"{self.task_name} gives no observation of task '{task}' (it gives: {have})")
        terms = self._task_view_terms(task)
        self._task_view = (task, ObservationBuilder(terms, self.num_envs, torch, self.device, dt=self.dt))
        self.obs_sizes[task] = sum(t.dim for t in terms)
        return terms

    def _task_view_terms(self, task: str) -> list[ObservationTerm]:
        """The observation terms of task ``task``'s ``policy`` group, as this task gives them (one of
        :attr:`task_views`; a task that lists some implements this and :meth:`_task_view_signals`).

        Raises:
            TaskConfigError: This task's config rules the view out (why, in one line).
        """
        raise NotImplementedError(f"{self.task_name} lists task views but does not build them")

    def _task_view_signals(self, task: str, signals: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Task ``task``'s onboard signals ``{source: [N, k]}`` from this task's (noise and bias applied)."""
        raise NotImplementedError(f"{self.task_name} lists task views but does not build them")

    def task_view_held(self, task: str) -> list[float]:
        """Normalised actions for the commands after those a policy of task ``task`` gives, held while it acts here
        (``[]``: it gives them all); e.g. a ``panda-push`` teacher in ``panda-multitask`` commands the 7 joints and
        the gripper is held closed, as ``panda-push`` holds it."""
        return []

    def contract(self, actor_groups: list[str]) -> Contract:
        """Deployment contract of a policy reading ``actor_groups`` (only ``policy`` is deployable)."""
        if actor_groups != ["policy"]:
            raise ContractError(
                f"only the onboard 'policy' observation group can be deployed; the actor reads {actor_groups}"
            )
        return Contract(
            task=self.task_name,
            control_period_s=self.dt,
            observation=self.policy_terms,
            action=self.action_spec(),
            joint_names=list(self.action_spec().names),
            default_pose=self.default_pose(),
            filter=self.filter_defaults(),
            extra=self.contract_extra(),
        )

    task_name: str = ""

    def _signal_size(self, name: str) -> int:
        return next(t.size for t in self.policy_terms if t.source == name)

    @staticmethod
    def _check_names(what: str, given: dict[str, float], valid: Sequence[str]) -> None:
        unknown = sorted(set(given) - set(valid))
        if unknown:
            raise TaskConfigError(f"{what}: unknown name(s) {unknown}; valid names: {', '.join(sorted(set(valid)))}")
