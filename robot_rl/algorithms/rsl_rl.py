"""rsl_rl as a drop-in trainer: a robot-rl training config as ``rsl-rl-lib``'s ``OnPolicyRunner`` configuration.

The same task, networks and PPO settings, so that rsl_rl and robot-rl's own PPO can be compared on one budget
(``bench/rsl_rl_vs_ppo.py``) and an rsl_rl user brings their runner to any robot-rl task. The env side is
:class:`sim.adapters.rsl_rl.RslRlVecEnv`; the checkpoint it writes exports with
``robot-rl export onnx model_<it>.pt --task TASK`` (:mod:`policies.nets.rsl_rl`).

Mapped (robot-rl -> rsl_rl 5.x): ``policy.actor_obs`` / ``critic_obs`` -> ``obs_groups`` ``actor`` / ``critic``;
``actor_hidden`` / ``critic_hidden`` / ``activation`` -> each ``MLPModel``'s ``hidden_dims`` / ``activation`` with
``obs_normalization`` on (robot-rl normalises both inputs); ``init_noise_std`` -> ``GaussianDistribution.init_std``
(a scalar std per action, as robot-rl's); ``ppo.num_steps`` -> ``num_steps_per_env``; ``num_epochs``,
``num_minibatches``, ``gamma``, ``lam``, ``clip_param``, ``value_loss_coef``, ``entropy_coef``, ``learning_rate``,
``schedule``, ``desired_kl``, ``max_grad_norm`` -> the same-named ``PPO`` arguments. Not mapped, because rsl_rl has
no such setting: ``ppo.value_clip`` (rsl_rl clips the value loss with ``clip_param``), ``refine_kl``,
``max_learning_rate``, ``min_std`` / ``max_std`` (rsl_rl's PPO runs its own way there; :func:`unmapped` names those a
config sets, and ``bench/rsl_rl_vs_ppo.py`` prints them). Refused: the curricula
``runner.reward_fade`` and ``runner.entropy_fade``, which change the reward or the loss while the teacher learns;
rsl_rl would train the starting scales and ``entropy_coef`` throughout, another objective than the file describes;
``ppo.plateau_kl`` (off unless asked for, so a run that asks would silently train without it); and
``policy.init_from`` (rsl_rl starts from its own checkpoints, ``OnPolicyRunner.load``).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from robot_rl.algorithms.ppo import PPOConfig
from robot_rl.config import TrainConfig
from sim.typed_config import ConfigError

UNMAPPED = ("refine_kl", "max_learning_rate", "min_std", "max_std")
"""``ppo`` settings rsl_rl has no equivalent of and trains without (module docstring)."""


def unmapped(cfg: TrainConfig) -> list[str]:
    """The settings of ``cfg`` that an rsl_rl run of it trains without: each :data:`UNMAPPED` setting that differs
    from robot-rl's default, as ``ppo.NAME=VALUE`` (for a run's log: the two trainers then differ by these)."""
    default = {f.name: f.default for f in fields(PPOConfig)}
    return [f"ppo.{n}={getattr(cfg.ppo, n)}" for n in UNMAPPED if getattr(cfg.ppo, n) != default[n]]


def runner_config(cfg: TrainConfig, save_interval: int = 50) -> dict[str, Any]:
    """rsl_rl's ``OnPolicyRunner`` configuration for ``cfg`` (see the module docstring for what maps to what).

    Args:
        cfg: A robot-rl training config (``load_config``).
        save_interval: Iterations between the runner's checkpoints (``model_<it>.pt`` in its log folder).

    Raises:
        ConfigError: ``cfg`` sets a curriculum rsl_rl has no equivalent of (``runner.reward_fade``,
            ``runner.entropy_fade``, ``ppo.plateau_kl``) or starts from a robot-rl run's networks
            (``policy.init_from``; rsl_rl loads its own checkpoints with ``OnPolicyRunner.load``), named in one line.
    """
    p, ppo, rc = cfg.policy, cfg.ppo, cfg.runner
    refused = (
        ([f"runner.reward_fade={rc.reward_fade}"] if rc.reward_fade else [])
        + (["runner.entropy_fade=true"] if rc.entropy_fade else [])
        + ([f"policy.init_from={p.init_from}"] if p.init_from is not None else [])
        + ([f"ppo.plateau_kl={ppo.plateau_kl}"] if ppo.plateau_kl is not None else [])
    )
    if refused:
        raise ConfigError(
            f"rsl_rl has no equivalent of {', '.join(refused)}; drop it from the config to train with rsl_rl"
        )

    def model(hidden: list[int], std: bool) -> dict[str, Any]:
        out: dict[str, Any] = {
            "class_name": "MLPModel",
            "hidden_dims": list(hidden),
            "activation": p.activation,
            "obs_normalization": True,
        }
        if std:
            out["distribution_cfg"] = {"class_name": "GaussianDistribution", "init_std": p.init_noise_std}
        return out

    return {
        "num_steps_per_env": ppo.num_steps,
        "save_interval": save_interval,
        "obs_groups": {"actor": list(p.actor_obs), "critic": list(p.critic_obs)},
        "actor": model(p.actor_hidden, std=True),
        "critic": model(p.critic_hidden, std=False),
        "algorithm": {
            "class_name": "PPO",
            "num_learning_epochs": ppo.num_epochs,
            "num_mini_batches": ppo.num_minibatches,
            "clip_param": ppo.clip_param,
            "gamma": ppo.gamma,
            "lam": ppo.lam,
            "value_loss_coef": ppo.value_loss_coef,
            "entropy_coef": ppo.entropy_coef,
            "learning_rate": ppo.learning_rate,
            "max_grad_norm": ppo.max_grad_norm,
            "schedule": ppo.schedule,
            "desired_kl": ppo.desired_kl,
            "use_clipped_value_loss": ppo.value_clip is not None,
        },
        "check_for_nan": True,
        "logger": "tensorboard",
    }
