"""Typed configuration of behaviour-cloning runs (``robot-rl train-bc``): ``configs/bc-<policy>.yaml`` +
``--set key=value`` overrides -> :class:`BCConfig`, validated before any work starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robot_rl.config import MAX_SEED, check_device
from robot_rl.imitation.students import DiffusionStudentConfig, StudentConfig
from sim.registry import CONFIG_DIR
from sim.typed_config import ConfigError, apply_override, from_dict, load_yaml


@dataclass
class BCTrainingConfig:
    """Optimisation.

    Attributes:
        batch_size: Windows per gradient step.
        learning_rate: Peak AdamW learning rate (cosine decay after a linear warm-up).
        weight_decay: AdamW weight decay.
        warmup_steps: Linear warm-up, gradient steps.
        max_steps: Gradient-step budget.
        max_time_s: Wall-clock budget, s (``null``: none).
        ema: Keep an exponential moving average of the weights and deploy it.
        ema_power: EMA warm-up: decay ``1 - (1 + step) ** -power`` (Chi et al.: 0.75).
        ema_max_decay: Upper bound of the EMA decay.
        log_interval: Log every this many steps.
        save_interval: Checkpoint every this many steps.
        eval_interval: Evaluate in simulation every this many steps (0: only at the end).
        eval_episodes: Episodes per evaluation.
        instruction_noise: Language-conditioned students: standard deviation of Gaussian noise added to each value
            of a training window's instruction embedding (then scaled back to unit length), so that the student
            learns from a neighbourhood of each instruction, not its one point (0: none).
    """

    batch_size: int = 256
    learning_rate: float = 1e-3
    weight_decay: float = 1e-6
    warmup_steps: int = 200
    max_steps: int = 20000
    max_time_s: float | None = None
    ema: bool = True
    ema_power: float = 0.75
    ema_max_decay: float = 0.999
    log_interval: int = 50
    save_interval: int = 1000
    eval_interval: int = 0
    eval_episodes: int = 100
    instruction_noise: float = 0.0

    def __post_init__(self) -> None:
        for name in ("batch_size", "max_steps", "log_interval", "save_interval", "eval_episodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"train.{name} must be >= 1, got {getattr(self, name)}")
        if self.warmup_steps < 0 or self.eval_interval < 0:
            raise ValueError("train.warmup_steps and train.eval_interval must be >= 0")
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(f"train.learning_rate must be > 0, got {self.learning_rate}")
        if not 0 <= self.ema_max_decay < 1:
            raise ValueError(f"train.ema_max_decay must be in [0, 1), got {self.ema_max_decay}")
        if not (math.isfinite(self.instruction_noise) and self.instruction_noise >= 0):
            raise ValueError(f"train.instruction_noise must be >= 0, got {self.instruction_noise}")
        if self.max_time_s is not None and not self.max_time_s > 0:
            raise ValueError(f"train.max_time_s must be > 0, got {self.max_time_s}")


@dataclass
class BCConfig:
    """A behaviour-cloning run; written into the run folder as ``config.yaml``.

    Attributes:
        dataset: Dataset folder (``robot-rl collect`` or any dataset in the documented layout).
        max_episodes: Train on the dataset's first this many episodes only (``null``: all).
        tasks: Train only on the episodes whose task text (the instruction) is one of these (``null``: all); a
            single-task baseline of a multi-task dataset. Applied before ``max_episodes``.
        task: Task to evaluate in (default: the dataset's ``robot_rl.task``).
        seed: Seed of the networks, batches and evaluation.
        device: Torch device.
        run_root: Parent of run folders.
        policy: The student network: a config class per kind (:mod:`robot_rl.imitation.students`), picked by
            ``policy.kind``.
        train: Optimisation.
    """

    dataset: str = ""
    max_episodes: int | None = None
    tasks: list[str] | None = None
    task: str = ""
    seed: int = 0
    device: str = "cpu"
    run_root: str = "runs"
    policy: StudentConfig = field(default_factory=DiffusionStudentConfig)
    train: BCTrainingConfig = field(default_factory=BCTrainingConfig)


def load_bc_config(
    policy: str | None, config_path: str | Path | None = None, overrides: list[str] | None = None, **shorthands: Any
) -> BCConfig:
    """Resolve a behaviour-cloning config: defaults, ``configs/bc-<policy>.yaml`` (or ``config_path``), then
    ``shorthands`` (``dataset``, ``seed``, ...; ``None`` values are skipped), then ``--set`` overrides.

    Raises:
        ConfigError: Unknown key, wrong type or invalid value; the message names it.
    """
    data: dict[str, Any] = {}
    if config_path is None and policy is not None:
        default = CONFIG_DIR / f"bc-{policy}.yaml"
        config_path = default if default.exists() else None
    if config_path is not None:
        data = load_yaml(str(config_path))
    if policy is not None:
        data.setdefault("policy", {})["kind"] = policy
    for key, value in shorthands.items():
        if value is not None:
            section, _, name = key.rpartition(".")
            (data.setdefault(section, {}) if section else data)[name] = value
    for item in overrides or []:
        apply_override(data, item)
    cfg = from_dict(BCConfig, data)
    if not cfg.dataset:
        raise ConfigError("no dataset given (--dataset DIR)")
    if cfg.max_episodes is not None and cfg.max_episodes < 1:
        raise ConfigError(f"max_episodes must be >= 1, got {cfg.max_episodes}")
    if cfg.tasks is not None and not cfg.tasks:
        raise ConfigError("tasks must name at least one task text (or be null: every episode)")
    if not 0 <= cfg.seed <= MAX_SEED:
        raise ConfigError(f"seed must be in [0, {MAX_SEED}], got {cfg.seed}")
    check_device(cfg.device)
    return cfg
