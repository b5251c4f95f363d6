"""Typed configuration of behaviour-cloning runs (``robot-rl train-bc``): ``configs/bc-<policy>.yaml`` +
``--set key=value`` overrides -> :class:`BCConfig`, validated before any work starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from robot_rl.config import CONFIG_DIR, MAX_SEED, check_device
from robot_rl.typed_config import ConfigError, apply_override, from_dict, load_yaml


@dataclass
class ChunkPolicyConfig:
    """The student network.

    Attributes:
        kind: ``diffusion`` (DDPM-trained, DDIM-sampled) or ``mlp`` (plain behaviour cloning of the chunk).
        obs_horizon: Observations per query ``To`` (Chi et al.: 2).
        pred_horizon: Actions per query ``Tp`` (Chi et al.: 16).
        action_horizon: Actions executed before re-planning ``Ta`` (Chi et al.: 8).
        ensemble_decay: Temporal ensembling at run time: plan every step and average the plans, each older plan
            weighted ``exp(m)`` times the next newer (``m > 0``: older plans count more, ACT; ``m < 0``: newer
            ones; ``null``: receding horizon only).
        denoiser: ``unet`` (1D U-Net with FiLM) or ``transformer``.
        down_dims: U-Net channels per level.
        d_model: Transformer token width.
        heads: Transformer attention heads.
        layers: Transformer blocks.
        mlp_hidden: Hidden sizes of the ``mlp`` policy.
        train_steps: DDPM diffusion steps.
        inference_steps: DDIM steps per chunk (evaluation and export).
        beta_schedule: Noise schedule (``diffusers`` name).
        clip_sample: Clip the predicted clean sample to ``[-1, 1]`` in every denoising step.
        cameras: Dataset cameras (``observation.images.<camera>``) the student also sees, e.g. ``[wrist]``; each
            gets an image encoder (:class:`~policies.nets.vision.ImageEncoder`). Empty: observations only.
        image_features: Features per camera.
        image_shift: Random-shift augmentation of training images, pixels (0: none).
    """

    kind: Literal["diffusion", "mlp"] = "diffusion"
    obs_horizon: int = 2
    pred_horizon: int = 16
    action_horizon: int = 8
    ensemble_decay: float | None = None
    denoiser: Literal["unet", "transformer"] = "unet"
    down_dims: list[int] = field(default_factory=lambda: [32, 64, 128])
    d_model: int = 64
    heads: int = 4
    layers: int = 3
    mlp_hidden: list[int] = field(default_factory=lambda: [256, 256, 256])
    train_steps: int = 100
    inference_steps: int = 10
    beta_schedule: Literal["squaredcos_cap_v2", "linear", "scaled_linear"] = "squaredcos_cap_v2"
    clip_sample: bool = True
    cameras: list[str] = field(default_factory=list)
    image_features: int = 64
    image_shift: int = 4

    def __post_init__(self) -> None:
        if min(self.obs_horizon, self.pred_horizon, self.action_horizon) < 1:
            raise ValueError("policy horizons must be >= 1")
        if self.action_horizon > self.pred_horizon:
            raise ValueError(f"policy.action_horizon {self.action_horizon} exceeds pred_horizon {self.pred_horizon}")
        if not 1 <= self.inference_steps <= self.train_steps:
            raise ValueError("policy.inference_steps must be in [1, train_steps]")
        if self.ensemble_decay is not None and not math.isfinite(self.ensemble_decay):
            raise ValueError(f"policy.ensemble_decay must be a finite number, got {self.ensemble_decay}")
        if len(set(self.cameras)) != len(self.cameras):
            raise ValueError(f"policy.cameras names a camera twice: {self.cameras}")
        if self.image_features < 1 or self.image_shift < 0:
            raise ValueError("policy.image_features must be >= 1 and policy.image_shift >= 0")
        for name in ("down_dims", "mlp_hidden"):
            if not getattr(self, name) or min(getattr(self, name)) < 1:
                raise ValueError(f"policy.{name} must be a non-empty list of sizes >= 1")


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
        if self.max_time_s is not None and not self.max_time_s > 0:
            raise ValueError(f"train.max_time_s must be > 0, got {self.max_time_s}")


@dataclass
class BCConfig:
    """A behaviour-cloning run; written into the run folder as ``config.yaml``.

    Attributes:
        dataset: Dataset folder (``robot-rl collect`` or any dataset in the documented layout).
        max_episodes: Train on the dataset's first this many episodes only (``null``: all).
        task: Task to evaluate in (default: the dataset's ``robot_rl.task``).
        seed: Seed of the networks, batches and evaluation.
        device: Torch device.
        run_root: Parent of run folders.
        policy: The student network.
        train: Optimisation.
    """

    dataset: str = ""
    max_episodes: int | None = None
    task: str = ""
    seed: int = 0
    device: str = "cpu"
    run_root: str = "runs"
    policy: ChunkPolicyConfig = field(default_factory=ChunkPolicyConfig)
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
    if not 0 <= cfg.seed <= MAX_SEED:
        raise ConfigError(f"seed must be in [0, {MAX_SEED}], got {cfg.seed}")
    check_device(cfg.device)
    return cfg
