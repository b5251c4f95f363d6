"""Typed training configuration: ``configs/<task>.yaml`` + ``--set key=value`` overrides -> :class:`TrainConfig`.

Resolution order (later wins): dataclass defaults and the task's ``default_config``, the YAML file, command-line
shorthands (``--num-envs``, ``--device``, ``--seed``, ``--max-time``), then ``--set`` overrides. Everything is
validated before any work starts; the resolved config is written into the run folder as ``config.yaml``.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from robot_rl.algorithms.ppo import PPOConfig
from robot_rl.curriculum import RewardFade, reward_fade
from sim.registry import UnknownTaskError, get_task
from sim.typed_config import ConfigError, apply_override, from_dict, load_yaml, positive, to_dict

MAX_NUM_ENVS = 1 << 24
"""Most worlds (and evaluation episodes) one process may ask for: 16.8 M, far beyond one GPU's memory."""
MAX_SEED = 2**32 - 1
"""Largest seed (evaluation adds a fixed offset; torch generators take 64-bit seeds)."""


@dataclass
class PolicyConfig:
    """Actor-critic networks.

    Attributes:
        actor_obs: Observation groups the actor reads, concatenated in this order (deployable: ``policy``).
        critic_obs: Observation groups the critic reads (may include privileged ``critic``).
        actor_hidden: Hidden layer sizes of the actor.
        critic_hidden: Hidden layer sizes of the critic.
        activation: ``elu``, ``tanh``, ``relu`` or ``silu``.
        init_noise_std: Initial standard deviation of the Gaussian policy (normalised action units).
        init_from: A run folder (its ``best.pt``, else its ``checkpoint.pt``) or a checkpoint file of the same task
            whose networks a new run starts from (``robot-rl train --init-from``): the actor with its normaliser and
            standard deviation, and the critic where it fits (:func:`robot_rl.checkpoint.init_networks`); the
            optimiser and counters start anew. ``null``: fresh networks.
    """

    actor_obs: list[str] = field(default_factory=lambda: ["policy"])
    critic_obs: list[str] = field(default_factory=lambda: ["critic"])
    actor_hidden: list[int] = field(default_factory=lambda: [64, 64])
    critic_hidden: list[int] = field(default_factory=lambda: [128, 128])
    activation: Literal["elu", "tanh", "relu", "silu"] = "tanh"
    init_noise_std: float = 0.5
    init_from: str | None = None

    def __post_init__(self) -> None:
        positive("policy.init_noise_std", self.init_noise_std)
        if self.init_from is not None and not self.init_from.strip():
            raise ValueError("policy.init_from must name a run folder or checkpoint, got an empty string")
        for name in ("actor_hidden", "critic_hidden"):
            if any(h < 1 for h in getattr(self, name)):
                raise ValueError(f"policy.{name} sizes must be >= 1, got {getattr(self, name)}")


@dataclass
class RunnerConfig:
    """Training loop.

    Attributes:
        max_iterations: Upper bound on PPO iterations.
        max_time_s: Wall-clock budget of one ``train`` call in seconds (``null``: none); a resumed run trains up to
            this long again.
        eval_interval: Evaluate the task's success criterion every this many iterations (0: never).
        eval_episodes: Episodes per evaluation.
        eval_gate: Skip a scheduled evaluation while fewer than this fraction of the training episodes that finished
            in the last ``eval_interval`` iterations succeeded (0: evaluate on schedule). Training episodes act with
            exploration noise, so they succeed less often than the deterministic evaluation; a low gate skips only
            the evaluations that cannot pass. A window in which no episode finished is evaluated.
        stop_on_success: Stop as soon as an evaluation meets the criterion (with ``stop_on_quality``: the task's
            stricter quality bar, ``VecEnv.quality``).
        stop_on_quality: What ``stop_on_success`` waits for: the quality bar instead of the success criterion.
        quality_confirm_episodes: A selection evaluation that meets the quality bar counts only once a second
            evaluation of this many episodes, on seeds of its own, meets it too (0: no second evaluation). Over 256
            episodes a 99 % bar is one crash from chance: quadrotor hover met it there and held 98.4 % on the
            held-out seeds (docs/benchmarks.md, "The last centimetres"). A confirmed evaluation outranks every
            unconfirmed one for ``best.pt``.
        selection_corner_episodes: Each selection evaluation also runs this many episodes at corners of the
            randomisation (every randomised parameter at the low or the high edge of its range, drawn per world and
            parameter); the quality bar then counts only where they meet it too, and ``best.pt`` ranks by the mean of
            the two scores (0: the ranges alone). The success criterion, ``ppo.refine_kl``'s switch and the held-out
            evaluations stay on the ranges, so the training itself is unchanged.
        plateau_evaluations: After the success criterion's switch to ``ppo.refine_kl``, switch PPO to
            ``ppo.plateau_kl`` once this many scheduled evaluations have passed without a better policy for
            ``best.pt`` (0: never; needs ``ppo.plateau_kl`` and ``eval_interval``). Counted from the kept policy's
            iteration, so a resumed run counts on.
        save_interval: Write a checkpoint every this many iterations.
        log_interval: Refresh the progress bar and logs every this many iterations.
        spread_episode_starts: Start worlds at random points of their first episode.
        reward_fade: Reward terms (keys of ``env.reward_scales``, each nonzero) whose scale fades linearly to 0
            once the policy succeeds in training (:mod:`robot_rl.curriculum`); empty: none.
        entropy_fade: PPO's entropy bonus (``ppo.entropy_coef``, then > 0) fades to 0 on the same schedule.
        reward_fade_after: The fade starts after the first iteration in which at least this share of the finished
            training episodes succeeded, in ``(0, 1]``.
        reward_fade_iterations: Iterations the fade lasts.
    """

    max_iterations: int = 1000
    max_time_s: float | None = None
    eval_interval: int = 10
    eval_episodes: int = 256
    eval_gate: float = 0.0
    stop_on_success: bool = True
    stop_on_quality: bool = False
    quality_confirm_episodes: int = 0
    selection_corner_episodes: int = 0
    plateau_evaluations: int = 0
    save_interval: int = 50
    log_interval: int = 1
    spread_episode_starts: bool = True
    reward_fade: list[str] = field(default_factory=list)
    entropy_fade: bool = False
    reward_fade_after: float = 0.2
    reward_fade_iterations: int = 100

    def __post_init__(self) -> None:
        for name in ("max_iterations", "eval_episodes", "save_interval", "log_interval", "reward_fade_iterations"):
            if getattr(self, name) < 1:
                raise ValueError(f"runner.{name} must be >= 1, got {getattr(self, name)}")
        if self.eval_interval < 0:
            raise ValueError(f"runner.eval_interval must be >= 0 (0: never), got {self.eval_interval}")
        if self.quality_confirm_episodes < 0:
            n = self.quality_confirm_episodes
            raise ValueError(f"runner.quality_confirm_episodes must be >= 0 (0: no confirmation), got {n}")
        if self.selection_corner_episodes < 0:
            n = self.selection_corner_episodes
            raise ValueError(f"runner.selection_corner_episodes must be >= 0 (0: the ranges alone), got {n}")
        if self.plateau_evaluations < 0:
            n = self.plateau_evaluations
            raise ValueError(f"runner.plateau_evaluations must be >= 0 (0: no switch on a plateau), got {n}")
        if not 0.0 <= self.eval_gate <= 1.0:
            raise ValueError(f"runner.eval_gate must be in [0, 1] (a success rate; 0: no gate), got {self.eval_gate}")
        if self.max_time_s is not None:
            positive("runner.max_time_s", self.max_time_s)
        if not 0.0 < self.reward_fade_after <= 1.0:
            after = self.reward_fade_after
            raise ValueError(f"runner.reward_fade_after must be in (0, 1] (a success rate), got {after}")
        if len(set(self.reward_fade)) != len(self.reward_fade):
            raise ValueError(f"runner.reward_fade names a term twice: {self.reward_fade}")


@dataclass
class TrainConfig:
    """Everything a training run needs; written into the run folder as ``config.yaml``.

    Attributes:
        task: Registered task name.
        seed: Seed of the environment, the networks and the minibatch shuffling.
        device: Torch device (``cpu``, ``cuda``, ``cuda:1``).
        num_envs: Parallel worlds.
        run_root: Folder under which ``<task>/<timestamp>-<seed>/`` run folders are made.
        env: The task's own configuration (its dataclass; see ``sim/tasks``).
        policy: Networks.
        ppo: Algorithm.
        runner: Training loop.
        compile: Run the hot paths through ``torch.compile``: PPO's rollout sampling and minibatch loss (forward and
            backward) and the env's physics where the task has a compilable one (:meth:`sim.vec_env.VecEnv.compile`).
            Needs a C++ compiler on CPU; the first run of a shape compiles (seconds, cached on disk for later runs).
            Numerics differ from eager in the last bits only. Measured in docs/benchmarks.md.
    """

    task: str
    seed: int = 0
    device: str = "cpu"
    num_envs: int = 4096
    run_root: str = "runs"
    env: Any = None
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    compile: bool = False


def default_config_path(task: str) -> Path:
    """The task's training config (``TaskSpec.train_config``: ``configs/<task>.yaml`` unless it names another).

    Raises:
        ConfigError: No such task (the message lists the registered ones).
    """
    try:
        return get_task(task).config_path
    except UnknownTaskError as exc:
        raise ConfigError(str(exc)) from None


def load_config(
    task: str | None,
    config_path: str | Path | None = None,
    overrides: list[str] | None = None,
    base: dict[str, Any] | None = None,
    base_name: str = "",
) -> TrainConfig:
    """Resolve a training config; see the module docstring for the order.

    Args:
        task: Task name (``None``: taken from the config file).
        config_path: YAML file; ``None`` uses ``base`` if given, else ``configs/<task>.yaml`` when it exists.
        overrides: ``key.sub=value`` strings.
        base: Plain config to start from instead of a file (a checkpoint's saved config when resuming).
        base_name: What ``base`` is, for messages (e.g. ``"checkpoint 'runs/.../checkpoint.pt'"``).

    Raises:
        ConfigError: Unknown task, unknown key, wrong type or invalid value; the message names it.
    """
    data: dict[str, Any] = {}
    source = f"config file '{config_path}'"
    if config_path is None and base is not None:
        data, source = copy.deepcopy(base), base_name or "the base config"
    elif config_path is None and task is not None and default_config_path(task).exists():
        config_path = default_config_path(task)
        source = f"config file '{config_path}'"
    if config_path is not None:
        data = load_yaml(str(config_path))
    if task is not None:
        if "task" in data and data["task"] != task:
            raise ConfigError(f"{source} is for task '{data['task']}', not '{task}'")
        data["task"] = task
    for item in overrides or []:
        apply_override(data, item)
        if task is not None and data.get("task") != task:  # the task is the command's argument, not a setting
            raise ConfigError(
                f"override '{item}' changes the task to {data.get('task')!r}; give the task as the command's "
                f"argument (robot-rl train <task>) instead of setting it"
            )
    return from_plain(data)


def task_defaults(task: str, overrides: list[str] | None = None) -> TrainConfig:
    """The task's own defaults (its config class, without ``configs/<task>.yaml``) plus ``overrides``: the setting
    the task's scripted expert acts in and its datasets are recorded in. The training file may differ from it where
    the RL teacher trains in another (``panda-lift`` trains its teacher behind the energy tank, its gripper open at
    zero).

    Raises:
        ConfigError: Unknown task or a bad override.
    """
    return load_config(task, None, overrides, base={"task": task}, base_name=f"the defaults of task '{task}'")


def from_plain(data: dict[str, Any]) -> TrainConfig:
    """Build a :class:`TrainConfig` from plain data, parsing ``env`` with the task's own config class."""
    data = dict(data)
    if "task" not in data:
        raise ConfigError("the config names no task (set 'task: <name>' or pass the task on the command line)")
    try:
        spec = get_task(data["task"])
    except KeyError as exc:
        raise ConfigError(str(exc)) from None
    env_data = data.pop("env", None)
    cfg = from_dict(TrainConfig, data)
    cfg.env = from_dict(spec.config_cls, env_data, "env")
    if not 1 <= cfg.num_envs <= MAX_NUM_ENVS:
        raise ConfigError(f"num_envs must be in [1, {MAX_NUM_ENVS}], got {cfg.num_envs}")
    if not 0 <= cfg.seed <= MAX_SEED:
        raise ConfigError(f"seed must be in [0, {MAX_SEED}], got {cfg.seed}")
    for key in ("eval_episodes", "quality_confirm_episodes", "selection_corner_episodes"):
        # each of these evaluations steps one world per episode at once
        if getattr(cfg.runner, key) > MAX_NUM_ENVS:
            raise ConfigError(f"runner.{key} must be <= {MAX_NUM_ENVS}, got {getattr(cfg.runner, key)}")
    if cfg.ppo.num_steps * cfg.num_envs < cfg.ppo.num_minibatches:
        raise ConfigError(
            f"ppo.num_minibatches ({cfg.ppo.num_minibatches}) exceeds the samples per iteration "
            f"(ppo.num_steps x num_envs = {cfg.ppo.num_steps * cfg.num_envs})"
        )
    plateau = (cfg.runner.plateau_evaluations > 0, cfg.ppo.plateau_kl is not None)
    if plateau[0] != plateau[1] or (plateau[0] and cfg.runner.eval_interval == 0):
        raise ConfigError(
            "runner.plateau_evaluations (> 0) and ppo.plateau_kl go together, with runner.eval_interval > 0; got "
            f"{cfg.runner.plateau_evaluations}, {cfg.ppo.plateau_kl} and {cfg.runner.eval_interval}"
        )
    check_device(cfg.device)
    runner_fade(cfg)
    return cfg


def runner_fade(cfg: TrainConfig) -> RewardFade | None:
    """The reward and entropy fade ``cfg.runner`` asks for (``None``: none), checked against the task and PPO.

    Raises:
        ConfigError: See :func:`robot_rl.curriculum.reward_fade`.
    """
    rc = cfg.runner
    entropy = cfg.ppo.entropy_coef if rc.entropy_fade else None
    return reward_fade(rc.reward_fade, cfg.env, rc.reward_fade_after, rc.reward_fade_iterations, entropy)


def check_compile(device: str) -> None:
    """Refuse ``compile=true`` on the CPU where ``torch.compile`` cannot build its kernels: no C++ compiler.

    Inductor compiles CPU kernels with ``$CXX`` (default ``g++``; ``clang++`` on macOS). Training checks it
    (:class:`~robot_rl.runner.OnPolicyRunner`); evaluating or exporting a run trained with ``compile=true`` does not
    compile and needs no compiler.

    Raises:
        ConfigError: Naming the compiler looked for and the two ways out.
    """
    import shutil
    import sys

    import torch

    if torch.device(device).type != "cpu":
        return
    cxx = os.environ.get("CXX") or ("clang++" if sys.platform == "darwin" else "g++")
    if shutil.which(cxx) is None:
        raise ConfigError(
            f"compile=true needs a C++ compiler for torch.compile on the CPU, and '{cxx}' ($CXX or the default) "
            "is not on PATH: install one (Debian: apt install g++) or set compile=false"
        )


def check_device(device: str) -> None:
    """Refuse a device string torch cannot use here (unknown type, CUDA without CUDA, a missing GPU index).

    Raises:
        ConfigError: Naming the device and why.
    """
    import torch

    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise ConfigError(f"device '{device}' is not a torch device (e.g. cpu, cuda, cuda:0): {exc}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device '{device}' was requested but CUDA is not available on this machine")
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"device '{device}' is not supported; use cpu or cuda[:index]")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ConfigError(f"device '{device}' does not exist: this machine has {torch.cuda.device_count()} GPU(s)")


def config_to_yaml(cfg: TrainConfig) -> str:
    """The resolved config as YAML (what ``config.yaml`` in the run folder holds)."""
    import yaml

    return yaml.safe_dump(to_dict(cfg), sort_keys=False)
