"""Datasets into one (``robot-rl dataset merge``): several teachers' demonstrations, one world to learn in.

A multi-skill student learns from one dataset, and each skill's demonstrations come from its own teacher (a
``panda-lift`` teacher records the lift, a ``panda-push`` teacher the push, each in ``panda-multitask``). The
datasets must record the same task, observation and action layout, control rate, cameras and sensors; their worlds
(the env config each was collected in, where a student of it is evaluated) may differ, but only where the merge is
told which value the merged dataset records: every env setting that differs between them must be named by an
``env.KEY=VALUE`` override (``env.skills=[lift,push]`` for the union of the skills, the tank the student deploys
behind, ...). Nothing is mixed silently: the merged ``info.json`` lists each source, its teacher and its own values
of the settings the merge decided.

The merged deployment contract is the merged world's (its tank, its delays), rebuilt from the task, and must lay out
the same inputs and outputs as the sources: an override cannot change what the student reads or commands. Writing
is all or nothing (:class:`~robot_rl.imitation.dataset.DatasetWriter`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

import sim
from policies.runtime.contract import Contract, ContractError
from policies.runtime.onnx_policy import LAST_ACTION_SIGNAL
from robot_rl.config import ConfigError, load_config, task_defaults
from robot_rl.imitation.dataset import Dataset, DatasetError, DatasetWriter, load_dataset, state_names
from robot_rl.runs.worlds import action_changes, observation_changes
from sim.typed_config import from_dict, to_dict

PER_SOURCE = ("teacher", "teacher_obs_groups", "teacher_kind", "dagger", "included", "merged", "seed", "action_noise",
              "keep_failed")  # fmt: skip
"""``robot_rl`` metadata of one collection (or merge): kept per source under ``merged``, not at the merged
dataset's top; a merged source keeps its own sources there, so a merge of merges keeps every teacher."""

SAME = ("task", "obs_groups", "unbiased", "cameras", "visual_randomization")
"""``robot_rl`` metadata every source must agree on (what the student reads and how it was sensed)."""


def _flat(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested settings as ``{"a.b": value}``. A list of terms named by their ``param`` (randomisation) is a section
    per term, as ``--set env.randomization.<param>.<field>`` addresses them; other lists are single values."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{prefix}{key}."))
        elif _terms(value):
            out.update(_flat({t["param"]: t for t in value}, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _terms(value: Any) -> bool:
    """Whether ``value`` is a list of settings each named by a distinct ``param``."""
    if not isinstance(value, list) or not value or not all(isinstance(t, Mapping) for t in value):
        return False
    names = [t.get("param") for t in value]
    return all(isinstance(n, str) for n in names) and len(set(names)) == len(names)


def world_differences(envs: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The env settings whose values differ between named worlds: ``{"env.KEY": {name: value}}``, sorted by key
    (a setting one world lacks counts, as ``None``)."""
    flat = {name: _flat(env) for name, env in envs.items()}
    keys = sorted(set().union(*(f.keys() for f in flat.values())))
    return {
        f"env.{k}": {name: f.get(k) for name, f in flat.items()}
        for k in keys
        if len({json.dumps(f.get(k), sort_keys=True) for f in flat.values()}) > 1
    }


def _named(key: str, overrides: Sequence[str]) -> bool:
    """Whether an ``env.KEY=VALUE`` override decides ``key``: it sets it, a setting inside it (one randomisation
    term of the list) or a section that holds it."""
    for o in overrides:
        k = o.split("=", 1)[0].strip()
        if k == key or k.startswith(f"{key}.") or key.startswith(f"{k}."):
            return True
    return False


def recorded_world(dataset: Dataset, task: str) -> dict[str, Any]:
    """The env config ``dataset`` records (``robot_rl.env``), validated as ``task``'s and complete: settings added
    to the task since it was recorded take their defaults, as a student of it is evaluated with them.

    Raises:
        DatasetError: It records no env config, or one ``task`` refuses (named).
    """
    plain = dataset.robot_rl.get("env")
    if not isinstance(plain, dict):
        raise DatasetError(f"dataset '{dataset.root}' records no world (robot_rl.env)")
    try:
        return to_dict(from_dict(sim.get_task(task).config_cls, plain, "env"))
    except (ConfigError, ValueError, KeyError) as exc:  # KeyError: an unknown task (its message lists the known)
        raise DatasetError(f"dataset '{dataset.root}': its robot_rl.env is not a valid {task} config: {exc}") from None


def describe_differences(diffs: Mapping[str, Mapping[str, Any]], limit: int = 4) -> str:
    """``env.K (v in 'a', w in 'b')`` for the first ``limit`` differing settings, ``; ``-joined, then the names of
    the others (``unset``: the setting is off or absent there)."""

    def short(v: Any) -> str:
        text = "unset" if v is None else json.dumps(v)
        return text if len(text) <= 40 else text[:37] + "..."

    shown = list(diffs.items())[:limit]
    parts = [f"{k} ({', '.join(f'{short(v)} in {n!r}' for n, v in by.items())})" for k, by in shown]
    more = f"; and {', '.join(list(diffs)[limit:])}" if len(diffs) > limit else ""
    return "; ".join(parts) + more


def recorded_contract(dataset: Dataset) -> Contract:
    """The deployment contract ``dataset`` records (``robot_rl.contract``), validated.

    Raises:
        DatasetError: It records none, or one that does not validate (named).
    """
    plain = dataset.robot_rl.get("contract")
    if not isinstance(plain, dict):
        raise DatasetError(f"dataset '{dataset.root}' records no deployment contract (robot_rl.contract)")
    try:
        return Contract.from_dict(plain)
    except ContractError as exc:
        raise DatasetError(f"dataset '{dataset.root}': its robot_rl.contract is not usable: {exc}") from None


def in_merged_units(source: Contract, merged: Contract, where: Path) -> Callable[[np.ndarray, int], np.ndarray] | None:
    """How a source's recorded actions become the merged world's: ``None`` where its contract reads and commands
    exactly as the merged one (:func:`~robot_rl.runs.worlds.observation_changes`, :func:`action_changes`); else a
    map of one episode's actions ``[T, A]`` (and its index, for messages) that re-expresses each absolute command
    whose mapping differs (a gripper's width under another gripper mapping) as the same clipped command,
    ``a' = (clip(offset + scale a, low, high) - offset') / scale'``.

    Raises:
        DatasetError: The source reads other inputs, commands another kind or reference, maps a relative command
            otherwise (its clip depends on the state), reads its own last action (recorded in its units), or, when
            mapped, an episode commands what the merged mapping cannot express (named).
    """
    changed = observation_changes(source.observation, merged.observation)
    if changed:
        raise DatasetError(f"dataset '{where}' reads otherwise than the merged world: {changed[0]}")
    if not action_changes(source, merged):
        return None
    a, m = source.action, merged.action
    if (a.kind, a.unit, a.reference) != (m.kind, m.unit, m.reference):
        raise DatasetError(
            f"dataset '{where}' commands {a.kind} relative to '{a.reference}', the merged world {m.kind} relative to "
            f"'{m.reference}'"
        )
    rows = [(a.scale[i], a.offset[i], a.low[i], a.high[i]) for i in range(a.size)]
    differ = [i for i in range(a.size) if rows[i] != (m.scale[i], m.offset[i], m.low[i], m.high[i])]
    relative = source.reference_slice()[1] if a.reference else 0
    if any(i < relative for i in differ):
        raise DatasetError(
            f"dataset '{where}': command '{a.names[differ[0]]}' is relative to '{a.reference}' and maps otherwise in "
            "the merged world; only absolute commands can be re-expressed"
        )
    if any(t.source == LAST_ACTION_SIGNAL for t in source.observation):
        raise DatasetError(f"dataset '{where}' reads its last action in its own units; its mapping cannot change")
    cols = np.asarray(differ)

    def mapping(spec: Any) -> tuple[np.ndarray, ...]:  # scale, offset, low, high of the differing commands
        return tuple(np.asarray([getattr(spec, f)[i] for i in differ]) for f in ("scale", "offset", "low", "high"))

    (scale, offset, low, high), (scale_m, offset_m, low_m, high_m) = mapping(a), mapping(m)

    def remap(action: np.ndarray, episode: int) -> np.ndarray:
        command = np.clip(offset + scale * action[:, cols].astype(np.float64), low, high)
        mapped = (command - offset_m) / scale_m
        bad = (np.abs(mapped) > 1 + 1e-6) | (command < low_m - 1e-9) | (command > high_m + 1e-9)
        if bad.any():
            t, j = (int(v[0]) for v in np.nonzero(bad))
            raise DatasetError(
                f"dataset '{where}' episode {episode} step {t}: command '{a.names[differ[j]]}' {command[t, j]:g} is "
                "outside what the merged world's action mapping reaches"
            )
        out = action.copy()
        out[:, cols] = np.clip(mapped, -1.0, 1.0)
        return out

    return remap


@dataclass
class MergeSummary:
    """What a merge wrote.

    Attributes:
        out: The merged dataset's folder.
        sources: ``(folder, episodes, frames)`` per source, in order.
        decided: The env settings that differed and the value the merged dataset records (``env.KEY`` -> value).
    """

    out: Path
    sources: list[tuple[Path, int, int]]
    decided: dict[str, Any]

    def lines(self) -> list[str]:
        """Readable summary."""
        rows = [f"  {p}: {n} episodes, {f} frames" for p, n, f in self.sources]
        decided = [f"  {k} = {json.dumps(v)}" for k, v in self.decided.items()]
        episodes, frames = sum(s[1] for s in self.sources), sum(s[2] for s in self.sources)
        return [
            f"merged {len(self.sources)} datasets:",
            *rows,
            *(["the merged world (where its students are evaluated) sets what they differed in:", *decided]
              if decided else ["they were recorded in the same world"]),
            f"dataset: {self.out} ({episodes} episodes, {frames} frames)",
        ]  # fmt: skip


def _check_same(sets: Sequence[Dataset]) -> None:
    """Refuse sources that disagree on the layout, rate, cameras or sensors, naming the first that does."""
    first = sets[0]

    def facts(d: Dataset) -> dict[str, Any]:
        feats = d.info["features"]
        return {
            "observation.state names": feats["observation.state"].get("names"),
            "action names": feats["action"].get("names"),
            "fps": d.fps,
            "cameras": d.cameras,
            **{f"robot_rl.{k}": d.robot_rl.get(k) for k in SAME},
        }

    want = facts(first)
    for d in sets[1:]:
        for key, value in facts(d).items():
            if json.dumps(value, sort_keys=True) != json.dumps(want[key], sort_keys=True):
                raise DatasetError(
                    f"dataset '{d.root}' differs from '{first.root}' in its {key}: a student learns one layout "
                    "from one kind of sensor"
                )


def merge_datasets(sources: Sequence[Path], out: Path, overrides: Sequence[str] = ()) -> MergeSummary:
    """Write the episodes of ``sources``, in order, into the new dataset ``out``, in one world.

    Args:
        sources: Two or more dataset folders of the same task and layout.
        out: New dataset folder (must not exist).
        overrides: ``env.KEY=VALUE`` settings of the merged world (applied to the first source's env config); every
            setting in which the sources' worlds differ must be named by one.

    Raises:
        DatasetError: Fewer than two sources, an unreadable one, sources that differ in layout, rate, cameras or
            sensors, worlds that differ in a setting no override names (each named with its values), or a merged
            world whose contract lays out other inputs or outputs.
        ConfigError: A bad override (not ``env.*``, an unknown key, an invalid value).
    """
    if len(sources) < 2:
        raise DatasetError("merge needs at least two datasets")
    bad = [o for o in overrides if not o.startswith("env.")]
    if bad:
        raise ConfigError(f"--set {bad[0]!r}: a merge sets only env.* keys (the merged dataset's world)")
    sets = [load_dataset(s) for s in sources]
    _check_same(sets)
    first = sets[0]
    task = first.robot_rl.get("task")
    with_env = [d.robot_rl.get("env") is not None for d in sets]
    if any(with_env) and not all(with_env):
        lacking = next(d.root for d, has in zip(sets, with_env, strict=True) if not has)
        raise DatasetError(f"dataset '{lacking}' records no world (robot_rl.env) and others do; merge like with like")
    if all(with_env) and not (isinstance(task, str) and task):
        raise DatasetError(f"dataset '{first.root}' records a world but no task (robot_rl.task) to read it as")
    envs = {str(d.root): recorded_world(d, str(task)) for d in sets} if all(with_env) else {}
    diffs = world_differences(envs)
    undecided = {k: v for k, v in diffs.items() if not _named(k, overrides)}
    if undecided:
        raise DatasetError(
            f"the datasets were recorded in different worlds: {describe_differences(undecided)}; say which the "
            "merged dataset records (its students are evaluated there) with --set env.KEY=VALUE for each"
        )
    meta = first.robot_rl
    extra = {k: v for k, v in meta.items() if k not in PER_SOURCE}
    if all(with_env):
        assert isinstance(task, str)
        world = to_dict(task_defaults(task, ["device=cpu"]))
        world["env"] = envs[str(first.root)]
        try:
            cfg = load_config(None, None, list(overrides), base=world, base_name=f"the world of '{first.root}'")
        except ConfigError as exc:
            raise ConfigError(f"--set: {exc}") from None
        env = sim.make(task, 1, torch.device("cpu"), cfg.env)
        try:
            contract = env.contract(list(meta.get("obs_groups", ["policy"])))
        finally:
            env.close()
        names = first.info["features"]["observation.state"]["names"]
        actions = first.info["features"]["action"]["names"]
        if state_names(contract) != names or list(contract.action.names) != actions:
            raise DatasetError(
                f"the merged world lays out {contract.obs_dim} inputs and {contract.action.size} actions, the datasets "
                f"{len(names)} and {len(actions)}: an override may not change what the student reads or commands"
            )
        for d in sets:
            remap = in_merged_units(recorded_contract(d), contract, d.root)
            if remap is not None:
                d.episodes = [dataclasses.replace(ep, action=remap(ep.action, i)) for i, ep in enumerate(d.episodes)]
        merged_env = to_dict(cfg.env)
        extra.update(env=merged_env, contract=contract.to_dict())
        flat = _flat(merged_env)
        decided = {k: flat.get(k.removeprefix("env.")) for k in diffs}
    elif overrides:
        raise DatasetError("these datasets record no world to set (robot_rl.env); merge them without --set")
    else:
        decided = {}
        contracts = {json.dumps(d.robot_rl.get("contract"), sort_keys=True) for d in sets}
        if len(contracts) > 1:
            raise DatasetError("the datasets carry different deployment contracts and record no world to rebuild one")
    kinds = {d.robot_rl.get("teacher_kind") for d in sets}
    extra["teacher"] = f"{len(sets)} datasets merged: " + "; ".join(str(d.robot_rl.get("teacher")) for d in sets)
    if len(kinds) == 1 and None not in kinds:
        extra["teacher_kind"] = kinds.pop()
    extra["merged"] = [
        {
            "dataset": str(d.root),
            "episodes": len(d.episodes),
            **{k: d.robot_rl[k] for k in PER_SOURCE if k in d.robot_rl},
            "env": {k: by[str(d.root)] for k, by in diffs.items()},
        }
        for d in sets
    ]
    writer = DatasetWriter(
        out, first.fps, list(first.info["features"]["observation.state"]["names"]),
        list(first.info["features"]["action"]["names"]), str(first.info.get("robot_type", "")), extra, first.cameras,
    )  # fmt: skip
    with writer:
        for d in sets:
            for ep in d.episodes:
                writer.add_episode(ep)
        written = writer.close()
    return MergeSummary(written, [(d.root, len(d.episodes), d.num_frames) for d in sets], decided)
