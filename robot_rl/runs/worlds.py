"""Evaluating a trained policy in another world than its own (``robot-rl eval RUN --set env.KEY=VALUE``): what every
run kind checks before it does.

A policy is evaluated only in worlds with the interface it was trained on: the same observation terms (names, sizes,
units, history) and each action mapped to the same robot command (the contract's action section). Everything else
(the energy tank, delays, randomisation ranges, sensor noise, episode length) may change.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from policies.runtime.contract import Contract, ObservationTerm
from sim.typed_config import ConfigError


def check_env_overrides(overrides: list[str]) -> None:
    """Refuse a ``--set`` item that is not an env setting (``env.KEY=VALUE``), by name.

    Raises:
        ConfigError: A key outside ``env``.
    """
    for item in overrides:
        key = item.partition("=")[0].strip()
        if not key.startswith("env."):
            raise ConfigError(
                f"--set '{item}': a trained policy is evaluated in another world only (env.KEY=VALUE); "
                f"'{key}' is not an env setting"
            )


def action_changes(before: Contract, after: Contract, held: int = 0) -> list[str]:
    """Which fields of the contract's action section ``after`` maps otherwise than ``before`` (``the action's
    scale``); ``[]``: each action maps to the same command. With ``held``, ``after`` has that many commands more,
    held by the world (:meth:`~sim.tasks.base.BatchedTask.task_view_held`), and its first ``before.size`` are
    compared."""
    old, new = dataclasses.asdict(before.action), dataclasses.asdict(after.action)
    if new["size"] != old["size"] + held:
        return ["the action's size"]
    new = {k: v[: old["size"]] if isinstance(v, list) else v for k, v in new.items() if k != "size"}
    return [f"the action's {k}" for k in new if new[k] != old[k]]


def observation_changes(before: Sequence[ObservationTerm], after: Sequence[ObservationTerm]) -> list[str]:
    """The first observation term ``after`` gives otherwise than ``before`` (``observation term 5 'object_position'
    [3] -> 'object_positions' [9]``), or the number of terms and the first one added or left out where only that
    differs; ``[]``: the same layout term by term (name, size, source, unit, history)."""
    for i, (a, b) in enumerate(zip(before, after, strict=False)):
        if dataclasses.asdict(a) != dataclasses.asdict(b):
            return [f"observation term {i} '{a.name}' [{a.dim}] -> '{b.name}' [{b.dim}]"]
    if len(before) != len(after):
        extra = (after if len(after) > len(before) else before)[min(len(before), len(after))]
        sign = "+" if len(after) > len(before) else "-"
        return [f"observation terms {len(before)} -> {len(after)}: {sign} '{extra.name}' [{extra.dim}]"]
    return []


def refuse_changes(overrides: list[str], changed: list[str], what: str) -> None:
    """Refuse ``overrides`` that change the interface (``changed``, from the functions above) of ``what`` (``the
    policy``, ``the student``), in one line.

    Raises:
        ConfigError: ``changed`` is not empty.
    """
    if changed:
        raise ConfigError(
            f"--set {' '.join(overrides)} changes what {what} reads or commands ({', '.join(changed)}); a trained "
            "policy is evaluated only in worlds with the interface it was trained on"
        )
