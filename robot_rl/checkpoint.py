"""Checkpoints: model (with its normalisers), optimiser, counters, the resolved config and the training state that
makes a resume an exact continuation (random streams, the env's worlds), written atomically.

Layout of ``checkpoint.pt`` (a ``torch.save`` dict, loaded with ``weights_only=True``)::

    format        "robot-rl-checkpoint-v2" (v1: the same without "training"; read, resumed inexactly)
    config        resolved TrainConfig as plain data; export, eval and resume read it from here
    model         ActorCritic state dict (finite: a non-finite model is never written)
    optimizer     Adam state dict
    iteration, env_steps, elapsed_s, learning_rate
    training      {"ppo_rng": generator state, "env": VecEnv state, "obs": {group: [N, D]}, "partial": [N] bool}

A checkpoint is written only at an iteration boundary, from a consistent snapshot, so what is on disk is always
the state after a whole number of updates.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from policies.runtime.files import atomic_path

FORMAT = "robot-rl-checkpoint-v2"
READABLE_FORMATS = ("robot-rl-checkpoint-v1", FORMAT)
REQUIRED = {"config": dict, "model": dict, "optimizer": dict, "iteration": int, "env_steps": int}


class CheckpointError(ValueError):
    """A checkpoint file is missing, unreadable, non-finite or does not fit the model."""


MISMATCH_CHARS = 400
"""Longest account of what did not fit that an error message quotes (a whole other network names every key)."""


def state_dict_mismatch(exc: Exception) -> str:
    """One line naming what did not fit when ``load_state_dict`` raised ``exc``: torch's per-key complaints (missing,
    unexpected, size mismatch) joined, without its header line ("Error(s) in loading state_dict for ...")."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines()]
    detail = [ln for ln in lines[1:] if ln] if lines and lines[0].startswith("Error(s) in loading") else lines
    text = re.sub(r"torch\.Size\((\[[^\]]*\])\)", r"\1", "; ".join(ln.rstrip(". ") for ln in detail))
    return (text[:MISMATCH_CHARS] + " ...") if len(text) > MISMATCH_CHARS else text or type(exc).__name__


def first_non_finite(tensors: dict[str, Any]) -> str | None:
    """Name of the first floating-point tensor of a state dict holding NaN or inf, or ``None``."""
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all()):
            return name
    return None


def save_checkpoint(path: Path, state: dict[str, Any]) -> Path:
    """Write ``state`` (see the module docstring) to ``path`` atomically (temp file + rename).

    Raises:
        CheckpointError: The model holds non-finite values (the previous checkpoint is left untouched).
    """
    if (bad := first_non_finite(state["model"])) is not None:
        raise CheckpointError(f"refusing to write '{path}': the model's '{bad}' holds non-finite values")
    with atomic_path(path) as tmp:
        torch.save({"format": FORMAT, **state}, tmp)
    return path


BC_FORMAT = "robot-rl-bc-checkpoint-v1"
"""Format of behaviour-cloning checkpoints (``robot_rl.imitation.train_bc``)."""


def read_any_checkpoint(path: Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """Load a PPO or behaviour-cloning checkpoint's contents (the ``format`` key says which).

    Raises:
        CheckpointError: Missing, not a file, unreadable, or not a robot-rl checkpoint.
    """
    if not path.exists():
        raise CheckpointError(f"checkpoint '{path}' does not exist")
    if not path.is_file():
        raise CheckpointError(f"checkpoint '{path}' is not a file")
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:  # torch raises many types for corrupt files
        raise CheckpointError(f"checkpoint '{path}' could not be read ({type(exc).__name__}: {exc})") from None
    if not isinstance(state, dict) or state.get("format") not in (*READABLE_FORMATS, BC_FORMAT):
        raise CheckpointError(f"'{path}' is not a robot-rl checkpoint")
    return state


def read_checkpoint(path: Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """Load a PPO checkpoint's contents, with errors that name the file and what is wrong.

    Raises:
        CheckpointError: Missing, not a file, unreadable, not a robot-rl PPO checkpoint, or missing a section.
    """
    state = read_any_checkpoint(path, device)
    if state["format"] == BC_FORMAT:
        raise CheckpointError(f"'{path}' holds a behaviour-cloning policy (train-bc), not a PPO one")
    for key, kind in REQUIRED.items():
        if not isinstance(state.get(key), kind) or isinstance(state.get(key), bool):
            raise CheckpointError(f"checkpoint '{path}' is damaged: '{key}' is missing or not a {kind.__name__}")
    if not isinstance(state["config"].get("task"), str):
        raise CheckpointError(f"checkpoint '{path}' is damaged: its config names no task")
    return state


def load_checkpoint(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, device: torch.device | str
) -> dict[str, Any]:
    """Restore model (and optimiser) state from ``path``; returns the checkpoint's contents.

    Raises:
        CheckpointError: As :func:`read_checkpoint`, or the weights do not fit ``model`` or are not finite.
    """
    state = read_checkpoint(path, device)
    if (bad := first_non_finite(state["model"])) is not None:
        raise CheckpointError(f"checkpoint '{path}' holds non-finite values in '{bad}'; it cannot be used")
    try:
        model.load_state_dict(state["model"])
        if optimizer is not None:
            optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"checkpoint '{path}' does not fit this model: {state_dict_mismatch(exc)}") from None
    return state


ACTOR_PARTS = ("actor.", "actor_normalizer.", "log_std")
"""State-dict prefixes of the actor: its layers, its input normaliser and its standard deviation."""
CRITIC_PARTS = ("critic.", "critic_normalizer.")
"""State-dict prefixes of the critic and its input normaliser."""


def init_file(source: Path) -> Path:
    """The checkpoint ``policy.init_from`` names: a file as given; a run folder's ``best.pt`` (the policy its
    selection evaluations kept), else its ``checkpoint.pt`` (the last).

    Raises:
        CheckpointError: Nothing there, or a folder with neither file.
    """
    if source.is_file():
        return source
    if not source.is_dir():
        raise CheckpointError(f"policy.init_from: '{source}' is neither a run folder nor a checkpoint file")
    for name in ("best.pt", "checkpoint.pt"):
        if (source / name).is_file():
            return source / name
    raise CheckpointError(f"policy.init_from: run folder '{source}' has no best.pt or checkpoint.pt")


def _mismatch(theirs: dict[str, Any], mine: dict[str, Any]) -> str | None:
    """What keeps one part of a state dict from loading into another, in words, or ``None`` if it fits."""
    for name, t in mine.items():
        if name in theirs and not isinstance(theirs[name], torch.Tensor):
            return f"{name} is a {type(theirs[name]).__name__}, not a tensor"
        if name in theirs and theirs[name].shape != t.shape:
            return f"{name} is {list(theirs[name].shape)} there, {list(t.shape)} here"
    if theirs.keys() != mine.keys():
        odd = sorted(set(theirs) ^ set(mine))
        return f"its layers differ ({', '.join(odd[:4])}{' ...' if len(odd) > 4 else ''})"
    return None


def init_networks(source: Path, model: torch.nn.Module, task: str, policy: dict[str, Any]) -> str:
    """Start a new run's ``model`` from the networks of another run of ``task`` (``policy.init_from``).

    The actor (layers, input normaliser, standard deviation) must fit exactly; the critic is copied too when it
    reads the same observation groups with the same shapes, and otherwise starts fresh (a critic with privileged
    inputs the source run lacked: a height scan on rough terrain). Nothing else carries over: the optimiser, the
    learning rate and the counters start anew.

    Args:
        source: A run folder or checkpoint file (:func:`init_file`).
        model: The new run's actor-critic, freshly built (modified in place).
        task: The new run's task.
        policy: The new run's ``policy`` config as plain data.

    Returns:
        One line saying where from and what was copied: ``'<file>' (iteration N): actor and critic``.

    A run of another task whose actor reads the onboard group starts a run whose actor reads that task's view
    (``policy.actor_obs: [<source task>]``, e.g. a ``panda-lift`` teacher in ``panda-multitask`` with
    ``env.task_view``): the actor is copied, the critic starts fresh.

    Raises:
        CheckpointError: No usable checkpoint; another task (but for its view); an actor that reads other
            observation groups, has another activation, or does not fit (the first differing tensor named);
            non-finite weights.
    """
    path = init_file(source)
    state = read_checkpoint(path)
    saved = state["config"]
    before = saved.get("policy", {})
    # another task's onboard actor may start one that reads that task's view here (env.task_view)
    view = saved["task"] != task and policy["actor_obs"] == [saved["task"]] and before.get("actor_obs") == ["policy"]
    if saved["task"] != task and not view:
        raise CheckpointError(
            f"policy.init_from: '{path}' holds a '{saved['task']}' policy, not '{task}' (a policy of another task "
            f"starts a run only whose actor reads that task's view: policy.actor_obs=[{saved['task']}])"
        )
    for key in ("activation",) if view else ("actor_obs", "activation"):
        if before.get(key) != policy[key]:
            raise CheckpointError(
                f"policy.init_from: '{path}' was trained with policy.{key}={before.get(key)}, not {policy[key]}"
            )
    own = model.state_dict()

    def part(tensors: dict[str, Any], prefixes: tuple[str, ...]) -> dict[str, Any]:
        return {k: v for k, v in tensors.items() if k.startswith(prefixes)}

    actor = part(state["model"], ACTOR_PARTS)
    if (why := _mismatch(actor, part(own, ACTOR_PARTS))) is not None:
        raise CheckpointError(f"policy.init_from: the actor in '{path}' does not fit this one: {why}")
    critic = part(state["model"], CRITIC_PARTS)
    fresh = (
        f"a critic of {saved['task']}"
        if view
        else f"reads {before.get('critic_obs')} there, {policy['critic_obs']} here"
        if before.get("critic_obs") != policy["critic_obs"]
        else _mismatch(critic, part(own, CRITIC_PARTS))
    )
    copied = actor if fresh is not None else {**actor, **critic}
    if (bad := first_non_finite(copied)) is not None:
        raise CheckpointError(f"policy.init_from: '{path}' holds non-finite values in '{bad}'")
    model.load_state_dict(copied, strict=False)
    what = "actor and critic" if fresh is None else f"actor; the critic starts fresh ({fresh})"
    return f"'{path}' (iteration {state['iteration']}): {what}"
