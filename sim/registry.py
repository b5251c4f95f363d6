"""Task registry: one name per task, one place that knows how to build it.

Each task module registers a :class:`TaskSpec` at import. ``make("quadrotor-hover", num_envs=4096)`` builds an env
with the task's default config (or the config given); unknown names fail with the list of registered tasks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from sim.vec_env import VecEnv


class UnknownTaskError(KeyError):
    """No task of that name is registered."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


@dataclass(frozen=True)
class TaskSpec:
    """How to build one task.

    Attributes:
        name: Registered name, ``robot-skill``.
        config_cls: Dataclass holding the task's env config (its defaults are the task's ``default_config``).
        factory: ``factory(cfg, num_envs, device, seed) -> VecEnv``.
        backend: Simulation backend the factory uses (``torch``, ``mujoco``, ...).
        description: One line for ``robot-rl --help`` and error messages.
        success: The task's success criterion in words (empty if it has none).
    """

    name: str
    config_cls: type
    factory: Callable[[Any, int, torch.device, int], VecEnv]
    backend: str
    description: str
    success: str = ""


_REGISTRY: dict[str, TaskSpec] = {}


def register(spec: TaskSpec) -> TaskSpec:
    """Add a task; registering a name twice is a programming error."""
    if spec.name in _REGISTRY:
        raise ValueError(f"task '{spec.name}' is registered twice")
    _REGISTRY[spec.name] = spec
    return spec


def task_names() -> list[str]:
    """Registered task names, sorted."""
    _load_builtin_tasks()
    return sorted(_REGISTRY)


def get_task(name: str) -> TaskSpec:
    """Look a task up by name; the error lists every registered task."""
    _load_builtin_tasks()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownTaskError(f"unknown task '{name}'; registered tasks: {', '.join(sorted(_REGISTRY))}") from None


def make(
    name: str,
    num_envs: int,
    device: str | torch.device = "cpu",
    cfg: Any | None = None,
    seed: int = 0,
) -> VecEnv:
    """Build task ``name`` with ``num_envs`` worlds on ``device``.

    Args:
        name: Registered task name.
        num_envs: Number of parallel worlds (>= 1).
        device: Torch device for every tensor the env returns.
        cfg: The task's config dataclass; ``None`` uses its defaults.
        seed: Seed of the env's random stream.
    """
    spec = get_task(name)
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    cfg = spec.config_cls() if cfg is None else cfg
    if not isinstance(cfg, spec.config_cls):
        raise TypeError(f"task '{name}' expects a {spec.config_cls.__name__}, got {type(cfg).__name__}")
    return spec.factory(cfg, num_envs, torch.device(device), seed)


def _load_builtin_tasks() -> None:
    import sim.tasks  # noqa: F401  (registers the built-in tasks on import)
