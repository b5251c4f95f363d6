"""Task registry: one name per task, and one :class:`TaskSpec` that names everything the task has.

A task lives in one module (``sim/tasks/<family>/<task>.py``) that defines ``SPEC = TaskSpec(...)``; the one list of
built-in tasks is :data:`sim.tasks.BUILTIN` (name -> ``"module:SPEC"``), read lazily: looking a task up imports
only its own module. Everything else a task has is named by its spec, as a lazy ``"module:attr"`` entry point in
the way Isaac Lab's gym registrations carry ``env_cfg_entry_point`` (the training config, a scripted expert, a
model of the task in an independent simulator for sim-to-sim evaluation), so no other part of the project keeps a
table of task names. ``sim`` imports nothing above it: an entry point into ``robot_rl`` is a string here, resolved
by :func:`resolve` where it is used.

``make("quadrotor-hover", num_envs=4096)`` builds an env with the task's default config (or the config given);
unknown names fail with the list of registered tasks.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from sim.vec_env import VecEnv

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
"""Folder of the shipped training configs (``TaskSpec.train_config`` names a file in it)."""


class UnknownTaskError(KeyError):
    """No task of that name is registered."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


class EntryPointError(ValueError):
    """A ``"module:attr"`` entry point does not resolve (the message names it and why)."""


@dataclass(frozen=True)
class TaskSpec:
    """Everything one task has.

    Attributes:
        name: Registered name, ``robot-skill``.
        config_cls: Dataclass holding the task's env config (its defaults are the task's ``default_config``).
        factory: ``factory(cfg, num_envs, device, seed) -> VecEnv``.
        backend: Simulation backends the factory can use (``torch``, ``mujoco | mjwarp``, ...).
        description: One line for ``robot-rl tasks`` and error messages.
        robot: The robot family, whose facts live in ``sim/robots/<robot>.py`` (or its model in
            ``sim/robots/assets/<robot>.xml``): ``multirotor``, ``panda``, ``cartpole``.
        success: The task's success criterion in words (empty if it has none).
        train_config: The training config, a file in :data:`CONFIG_DIR` (default ``<name>.yaml``).
        expert: ``"module:attr"`` of a scripted expert class (``expert(env) -> .act(obs) / .reset(mask)``), ``""``
            if the task has none.
        transfer: Independent simulator -> ``"module:attr"`` of the task's model in it (a ``TransferSim``
            factory taking the contract), for ``robot-rl eval --sim``.
    """

    name: str
    config_cls: type
    factory: Callable[[Any, int, torch.device, int], VecEnv]
    backend: str
    description: str
    robot: str
    success: str = ""
    train_config: str = ""
    expert: str = ""
    transfer: Mapping[str, str] = field(default_factory=dict)

    @property
    def config_path(self) -> Path:
        """The training config file."""
        return CONFIG_DIR / (self.train_config or f"{self.name}.yaml")

    def expert_cls(self) -> Any:
        """The scripted expert class.

        Raises:
            EntryPointError: The task has none, or its entry point does not resolve.
        """
        if not self.expert:
            raise EntryPointError(f"task '{self.name}' has no scripted expert")
        return resolve(self.expert)

    def transfer_factory(self, simulator: str) -> Any:
        """The factory of the task's model in ``simulator``.

        Raises:
            EntryPointError: No model of the task in that simulator (the message lists those there are).
        """
        if simulator not in self.transfer:
            have = ", ".join(sorted(self.transfer)) or "none"
            raise EntryPointError(f"task '{self.name}' has no model in {simulator} (sim-to-sim engines: {have})")
        return resolve(self.transfer[simulator])


def resolve(entry_point: str) -> Any:
    """The object a ``"package.module:attr"`` entry point names, imported now.

    Raises:
        EntryPointError: Malformed, the module does not import, or it has no such attribute.
    """
    module, sep, attr = entry_point.partition(":")
    if not sep or not module or not attr:
        raise EntryPointError(f"entry point '{entry_point}' is not 'package.module:attr'")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as exc:
        raise EntryPointError(f"entry point '{entry_point}': module does not import ({exc})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise EntryPointError(f"entry point '{entry_point}': '{module}' has no '{attr}'")
        obj = getattr(obj, part)
    return obj


_REGISTRY: dict[str, TaskSpec] = {}


def register(spec: TaskSpec) -> TaskSpec:
    """Add a task that is not built in (a user's own); registering a name twice is a programming error."""
    if spec.name in _REGISTRY or spec.name in _builtin():
        raise ValueError(f"task '{spec.name}' is registered twice")
    _REGISTRY[spec.name] = spec
    return spec


def _builtin() -> dict[str, str]:
    from sim.tasks import BUILTIN

    return BUILTIN


def task_names() -> list[str]:
    """Registered task names, sorted."""
    return sorted({*_builtin(), *_REGISTRY})


def get_task(name: str) -> TaskSpec:
    """Look a task up by name (importing its module); the error lists every registered task."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    builtin = _builtin()
    if name not in builtin:
        raise UnknownTaskError(f"unknown task '{name}'; registered tasks: {', '.join(task_names())}")
    spec = resolve(builtin[name])
    if not isinstance(spec, TaskSpec) or spec.name != name:
        raise EntryPointError(f"sim.tasks.BUILTIN['{name}'] names {builtin[name]}, not the TaskSpec of '{name}'")
    return spec


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


def train_env_config(name: str, overrides: list[str] | None = None) -> Any:
    """The task's env config as its training config file sets it (``env`` section; defaults where the file is
    silent), with ``overrides`` (``"key=value"`` under ``env``) applied: what a simulated robot runs.

    Raises:
        UnknownTaskError: No such task.
        ConfigError: The file or an override is malformed (named).
    """
    from sim.typed_config import apply_override, from_dict, load_yaml

    spec = get_task(name)
    data = load_yaml(str(spec.config_path)) if spec.config_path.exists() else {}
    env = dict(data.get("env") or {})
    for item in overrides or []:
        apply_override(env, item)
    return from_dict(spec.config_cls, env, "env")
