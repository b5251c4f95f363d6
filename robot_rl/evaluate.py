"""Evaluation: run a fixed number of whole episodes and check the task's success criterion.

Every world runs exactly one episode from its own random start (the env is built with ``num_envs = episodes``), with
the deterministic policy (the Gaussian mean), randomisation on or off.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

import sim
from policies.nets import ActorCritic
from policies.runtime.onnx_policy import OnnxPolicy
from robot_rl.logger import save_png
from sim.randomization import DomainRandomizer
from sim.tasks.base import EnvVariant
from sim.typed_config import ConfigError
from sim.vec_env import Obs, VecEnv

PolicyFn = Callable[[Obs], torch.Tensor]
"""Maps observation groups to normalised actions ``[N, A]``."""

EVAL_SEED_OFFSET = 1_000_003
"""Held-out evaluations (the end of a run, ``robot-rl eval``) run with ``seed + EVAL_SEED_OFFSET``: other starts
than training, the same for every trainer, and never used to choose anything."""

SELECTION_SEED_OFFSET = 2_000_029
"""The evaluations *during* training (stopping, the best checkpoint) run with ``seed + SELECTION_SEED_OFFSET``: a
checkpoint chosen on the held-out episodes would be scored on the episodes it was chosen for."""

CONFIRM_SEED_OFFSET = 4_000_037
"""The second evaluation that confirms a selection evaluation's quality bar (``runner.quality_confirm_episodes``)
runs with ``seed + CONFIRM_SEED_OFFSET``: other starts than the selection evaluation it confirms."""


def pick(obs: Obs, groups: list[str]) -> torch.Tensor:
    """Concatenate observation groups in the configured order, ``[N, sum D_g]``."""
    return obs[groups[0]] if len(groups) == 1 else torch.cat([obs[g] for g in groups], dim=-1)


def deterministic_policy(model: ActorCritic, groups: list[str]) -> PolicyFn:
    """The Gaussian policy's mean on the observation groups ``groups`` (what evaluation and export run)."""
    return lambda obs: model.action_mean(pick(obs, groups))


def onnx_policy_fn(path: Path, groups: list[str], record: list[np.ndarray] | None = None) -> PolicyFn:
    """The exported policy ``path`` run by onnxruntime as a :data:`~robot_rl.evaluate.PolicyFn` of a simulation:
    its commands mapped back to normalised actions by the contract (as the ROS node's inverse); each batch of policy
    inputs is appended to ``record`` if given."""
    policy = OnnxPolicy(path)

    def act(obs: Obs) -> torch.Tensor:
        x = pick(obs, groups)
        inputs = x.detach().cpu().numpy().astype(np.float32)
        if record is not None:
            record.append(inputs)
        action = policy.normalized_action(policy.run_obs(inputs), policy.reference(inputs))
        return torch.from_numpy(action).to(x.device)

    return act


def setting_key(randomized: bool, tank_j: float | None = None, variant_key: str = "") -> str:
    """An evaluation's setting as a key of ``eval.yaml``: ``randomization_on``, ``randomization_on_tank_40J``,
    ``randomization_on_tank_40J_measured_delay``."""
    tank = f"_tank_{tank_j:g}J" if tank_j is not None else ""
    variant = f"_{variant_key}" if variant_key else ""
    return f"randomization_{'on' if randomized else 'off'}{tank}{variant}"


@dataclass
class EvalResult:
    """Outcome of one evaluation.

    Attributes:
        episodes: Per-episode arrays ``[E]``: ``return``, ``length``, ``success`` and the task's metrics.
        met: Whether the task's success criterion is met.
        figures: The criterion's figures (success rate, errors, ...).
        curves: Per-step means over worlds still running, ``{metric: [T]}``, for plots.
        randomized: Whether domain randomisation was on.
        dt: Control period of the curves, s.
        start_params: Each world's randomised parameters as its episode started, ``{name: [E, k]}`` (tasks with a
            randomiser; empty otherwise).
        quality_met: Whether the task's deployment quality bar is met (``VecEnv.quality``).
        score: The task's ranking score of these episodes (higher is better).
        tank_j: ``T_max`` of the energy tank in the loop, J (``None``: no tank).
        variant: What else differs from the trained setting, in words (``""``: nothing;
            :class:`sim.tasks.base.EnvVariant`), and ``variant_key`` the same as a key.
    """

    episodes: dict[str, np.ndarray]
    met: bool
    figures: dict[str, float]
    curves: dict[str, np.ndarray] = field(default_factory=dict)
    randomized: bool = True
    dt: float = 0.0
    start_params: dict[str, np.ndarray] = field(default_factory=dict)
    quality_met: bool = False
    score: float = float("nan")
    tank_j: float | None = None
    variant: str = ""
    variant_key: str = ""

    @property
    def setting(self) -> str:
        """The evaluation's setting in words: ``randomisation on``, ``..., energy tank 40 J``, ``..., <variant>``."""
        tank = f", energy tank {self.tank_j:g} J" if self.tank_j is not None else ""
        variant = f", {self.variant}" if self.variant else ""
        return f"randomisation {'on' if self.randomized else 'off'}{tank}{variant}"

    @property
    def key(self) -> str:
        """The setting as a key of ``eval.yaml`` (:func:`setting_key`)."""
        return setting_key(self.randomized, self.tank_j, self.variant_key)

    def summary(self) -> dict[str, Any]:
        """Plain-data summary (for YAML/JSON and printing)."""
        return {
            "randomization": self.randomized,
            **({"tank_max_j": self.tank_j} if self.tank_j is not None else {}),
            **({"variant": self.variant} if self.variant else {}),
            "episodes": len(self.episodes["return"]),
            "criterion_met": self.met,
            "quality_met": self.quality_met,
            "return_mean": float(self.episodes["return"].mean()),
            "return_std": float(self.episodes["return"].std()),
            "success_rate": float(self.episodes["success"].mean()),
            **{k: float(v) for k, v in self.figures.items()},
            **(
                {"lowest_tank_j": float(self.episodes["lowest_tank_j"].min())}
                if "lowest_tank_j" in self.episodes
                else {}
            ),
        }


def evaluate_env(env: VecEnv, policy: PolicyFn, seed: int) -> EvalResult:
    """Run one episode in every world of ``env`` and score it.

    Args:
        env: Env whose ``num_envs`` is the number of episodes.
        policy: Deterministic policy.
        seed: Seed of the starts and randomisation.
    """
    n = env.num_envs
    obs = env.reset(seed=seed)
    params = getattr(env, "params", None)  # drawn by the reset; a world's next episode draws anew
    start = {}
    if isinstance(params, dict):
        start = {k: v.detach().cpu().numpy().reshape(n, -1).copy() for k, v in params.items()}
    finished = torch.zeros(n, dtype=torch.bool, device=env.device)
    episodes: dict[str, torch.Tensor] = {}
    curves: dict[str, list[float]] = {}
    for _ in range(env.max_episode_length):
        with torch.inference_mode():
            actions = policy(obs)
        obs, _, terminated, truncated, info = env.step(actions)
        running = ~finished
        for k, v in info.log.items():
            if k.startswith("metric/") and bool(running.any()):
                curves.setdefault(k.removeprefix("metric/"), []).append(float(v[running].mean()))
        done = (terminated | truncated) & ~finished
        if bool(done.any()):
            assert info.episode_return is not None and info.success is not None and info.episode_length is not None
            fields = {
                "return": info.episode_return,
                "length": info.episode_length.float(),
                "success": info.success.float(),
                **info.episode_metrics,
            }
            for k, v in fields.items():
                episodes.setdefault(k, torch.zeros(n, device=env.device))[done] = v[done].float()
            finished |= done
        if bool(finished.all()):
            break
    data = {k: v.cpu().numpy() for k, v in episodes.items()}
    met, figures = type(env).criterion(data)
    quality_met, score = type(env).quality(data)
    curves_np = {k: np.asarray(v) for k, v in curves.items()}
    randomized = env.randomization_enabled
    return EvalResult(data, met, figures, curves_np, randomized, env.dt, start, quality_met and met, score)


def tank_of(env_cfg: Any) -> float | None:
    """``T_max`` (J) of the energy tank in the loop of a task config (``env.passivity``), ``None`` without one."""
    passivity = getattr(env_cfg, "passivity", None)
    return None if passivity is None else passivity.tank_max_j


def behind_tank(t_max: float) -> str:
    """``behind a 40 J tank`` / ``behind an 80 J tank`` (the article as the number is spoken)."""
    text = f"{t_max:g}"
    spoken_vowel = text.startswith("8") or text.split(".")[0] in ("11", "18")
    return f"behind {'an' if spoken_vowel else 'a'} {text} J tank"


def switched_tank(env_cfg: Any, env: VecEnv) -> Any | None:
    """``env_cfg`` with the energy tank the other way round, for the evaluation a user needs beside the run's own:
    without the tank where the run trained with one, else with the contract's deploy tank (``env``'s
    ``filter_defaults``: ``T_max``, ``T_0`` and refill). ``None`` for tasks without a tank in the loop."""
    passivity = getattr(env_cfg, "passivity", None)
    defaults = env.filter_defaults() if hasattr(env, "filter_defaults") else {}
    if passivity is None or defaults.get("tank_max_j") is None:
        return None
    if passivity.enabled:
        return dataclasses.replace(env_cfg, passivity=dataclasses.replace(passivity, tank_max_j=None, tank_init_j=None))
    deploy = dataclasses.replace(
        passivity,
        tank_max_j=float(defaults["tank_max_j"]),
        tank_init_j=float(defaults["tank_init_j"]),
        tank_power_w=float(defaults.get("tank_power_w", 0.0)),
    )
    return dataclasses.replace(env_cfg, passivity=deploy)


def measured_latency(env: VecEnv) -> EnvVariant | None:
    """``env``'s config with the latency measured on the robot's deploy path in place of the trained one, for the
    evaluation a user needs beside the run's own (:meth:`sim.tasks.base.BatchedTask.measured_latency`); ``None``
    for tasks without such a measurement."""
    hook = getattr(env, "measured_latency", None)
    return hook() if hook is not None else None


def corner_randomizer(env: VecEnv, task: str) -> DomainRandomizer:
    """``env``'s randomiser, whose ``corner_share`` draws worlds at the corners of the randomisation.

    Raises:
        ConfigError: ``task`` randomises no parameter, so it has no corners.
    """
    randomizer = getattr(env, "randomizer", None)
    if not isinstance(randomizer, DomainRandomizer) or not randomizer.terms:
        raise ConfigError(f"task '{task}' randomises no parameter: it has no corners of the randomisation to draw")
    return randomizer


def make_eval_env(
    task: str,
    env_cfg: Any,
    episodes: int,
    device: torch.device,
    randomize: bool,
    compile: bool = False,
    corner_share: float = 0.0,
) -> VecEnv:
    """An env with one world per evaluation episode, randomisation switched as asked (physics compiled if asked);
    a task with a training curriculum is told to evaluate over its whole range (``evaluation_mode``). With a
    ``corner_share`` in ``(0, 1]``, that share of the worlds draws every randomised parameter at an edge of its range
    (``runner.selection_corner_episodes``: 1); held-out evaluations keep 0.

    Raises:
        ConfigError: ``corner_share`` is above 0 for a task without domain randomisation.
    """
    env = sim.make(task, episodes, device, env_cfg)
    env.set_randomization(randomize)
    if hasattr(env, "evaluation_mode"):
        env.evaluation_mode()
    if corner_share > 0:
        corner_randomizer(env, task).corner_share = corner_share
    if compile:
        env.compile()
    return env


def plot_evaluation(results: list[EvalResult], path: Path, title: str) -> None:
    """Save a PNG: return histograms and per-step metric curves, one colour per randomisation setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = sorted({k for r in results for k in r.curves})
    fig, axes = plt.subplots(1, 1 + len(metrics), figsize=(5 * (1 + len(metrics)), 3.8))
    axes = np.atleast_1d(axes)
    for r in results:
        label = f"{r.setting} (success {r.episodes['success'].mean():.0%})"
        axes[0].hist(r.episodes["return"], bins=30, alpha=0.6, label=label)
        for ax, m in zip(axes[1:], metrics, strict=True):
            if m in r.curves:
                t = np.arange(len(r.curves[m])) * r.dt
                ax.plot(t, r.curves[m], label=label)
    axes[0].set_xlabel("episode return")
    axes[0].set_ylabel("episodes")
    axes[0].legend(fontsize=8)
    for ax, m in zip(axes[1:], metrics, strict=True):
        ax.set_xlabel("time [s]")
        ax.set_ylabel(f"mean {m} (episodes still running)")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)
