"""``robot-rl export int8 RUN``: an int8 copy of a PPO run's policy, calibrated in simulation and measured against the
float policy on held-out flights.

1. **Calibrate**: the float policy flies ``calibration_episodes`` episodes with randomisation on, from starts of
   their own (``seed + CALIBRATION_SEED_OFFSET``: neither the training, the selection nor the held-out evaluation
   seeds); every policy input is recorded (at most :data:`MAX_CALIBRATION` of them, evenly spaced) and the ranges of
   :func:`firmware_export.quantize.quantize` come from them.
2. **Measure**: the float ``policy.onnx`` and the int8 file, both through onnxruntime and the same contract mapping
   (so quantisation is the only difference), fly the run's held-out evaluation (``seed + EVAL_SEED_OFFSET``,
   randomisation on and off); the commands of the two are compared on every input recorded in the float policy's
   randomised flights, in normalised units ``(command - offset) / scale``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch

from firmware_export.quantize import QuantizationRecord, quantize
from policies.runtime.files import atomic_write_bytes
from policies.runtime.onnx_policy import OnnxPolicy
from robot_rl.evaluate import (
    EVAL_SEED_OFFSET,
    EvalResult,
    PolicyFn,
    evaluate_env,
    make_eval_env,
    onnx_policy_fn,
    pick,
    tank_of,
)
from sim.vec_env import Obs

CALIBRATION_SEED_OFFSET = 3_000_017
"""Calibration flights run with ``seed + CALIBRATION_SEED_OFFSET``: other starts than training, selection
(``SELECTION_SEED_OFFSET``) and the held-out evaluation (``EVAL_SEED_OFFSET``)."""
MAX_CALIBRATION = 20_000
"""Most recorded inputs kept for calibration (evenly spaced over the flights)."""
INT8_NAME = "policy_int8.onnx"


@dataclass
class ActionError:
    """``|int8 - float|`` of the commands on recorded inputs, normalised units (the action range is [-1, 1]).

    Attributes:
        inputs: Recorded inputs compared.
        max: Largest difference.
        mean: Mean difference.
        p99: 99th percentile.
    """

    inputs: int
    max: float
    mean: float
    p99: float


@dataclass
class Int8Comparison:
    """Held-out figures of the float and the int8 policy, side by side.

    Attributes:
        float_results: Evaluations of ``policy.onnx``, randomisation on then off.
        int8_results: The same for the int8 file.
        action_error: Command differences on the inputs of the float policy's randomised flights.
    """

    float_results: list[EvalResult]
    int8_results: list[EvalResult]
    action_error: ActionError

    def lines(self) -> list[str]:
        """A readable table: one row per figure, float and int8 beside each other."""
        out = []
        for f, q in zip(self.float_results, self.int8_results, strict=True):
            fs, qs = f.summary(), q.summary()
            out.append(f"randomisation {'on' if f.randomized else 'off'} ({len(f.episodes['success'])} episodes):")
            out.append(f"  {'':<28}{'float':>12}{'int8':>12}")
            out.append(f"  {'criterion':<28}{_met(f.met):>12}{_met(q.met):>12}")
            out.append(f"  {'quality bar':<28}{_met(f.quality_met):>12}{_met(q.quality_met):>12}")
            for k, v in fs.items():
                if isinstance(v, float) and isinstance(qs.get(k), float):
                    out.append(f"  {k:<28}{v:>12.4g}{qs[k]:>12.4g}")
        e = self.action_error
        out.append(
            f"int8 - float commands on {e.inputs:,} recorded inputs (normalised, range [-1, 1]): "
            f"max {e.max:.2e}, mean {e.mean:.2e}, 99th percentile {e.p99:.2e}"
        )
        return out

    def plain(self) -> dict[str, Any]:
        """The comparison as plain data (``int8.yaml``)."""
        return {
            ("randomization_on" if f.randomized else "randomization_off"): {
                "float": f.summary(),
                "int8": q.summary(),
            }
            for f, q in zip(self.float_results, self.int8_results, strict=True)
        } | {"action_error": dataclasses.asdict(self.action_error)}


def _met(flag: bool) -> str:
    return "met" if flag else "not met"


def recording_policy_fn(policy: PolicyFn, groups: list[str], record: list[np.ndarray]) -> PolicyFn:
    """``policy``, appending each batch of its inputs (``[N, obs_dim]`` float32) to ``record``."""

    def act(obs: Obs) -> torch.Tensor:
        record.append(pick(obs, groups).detach().cpu().numpy().astype(np.float32))
        return policy(obs)

    return act


def spaced(batches: list[np.ndarray], limit: int) -> np.ndarray:
    """At most ``limit`` rows of the concatenated ``batches``, evenly spaced."""
    rows = np.concatenate(batches, axis=0)
    if len(rows) <= limit:
        return rows
    return rows[np.linspace(0, len(rows) - 1, limit).round().astype(int)]


def calibrate(run: Any, episodes: int) -> tuple[np.ndarray, str]:
    """Policy inputs of the run's own (torch) policy flying ``episodes`` randomised episodes from calibration seeds.

    Returns:
        ``[B, obs_dim]`` float32 inputs (``B <=`` :data:`MAX_CALIBRATION`) and where they came from, in words.
    """
    from robot_rl.evaluate import deterministic_policy

    cfg = run.cfg
    record: list[np.ndarray] = []
    env = make_eval_env(cfg.task, cfg.env, episodes, torch.device(cfg.device), True)
    try:
        evaluate_env(
            env,
            recording_policy_fn(deterministic_policy(run.model, cfg.policy.actor_obs), cfg.policy.actor_obs, record),
            seed=cfg.seed + CALIBRATION_SEED_OFFSET,
        )
    finally:
        env.close()
    obs = spaced(record, MAX_CALIBRATION)
    source = (
        f"task {cfg.task}: {episodes} randomised episodes of the float policy, seed {cfg.seed} + "
        f"{CALIBRATION_SEED_OFFSET} ({sum(len(r) for r in record):,} inputs, {len(obs):,} kept)"
    )
    return obs, source


def export_int8(run: Any, float_onnx: Path, out: Path, calibration_episodes: int) -> tuple[Path, QuantizationRecord]:
    """Calibrate on the run's policy and write the int8 copy of ``float_onnx`` to ``out/policy_int8.onnx``
    (atomically: an earlier file there stays whole until the new one is complete)."""
    obs, source = calibrate(run, calibration_episodes)
    model, record = quantize(onnx.load(str(float_onnx)), obs, source)
    path = out / INT8_NAME
    atomic_write_bytes(path, model.SerializeToString())
    OnnxPolicy(path)  # the written file opens and honours its contract, as a robot will load it
    return path, record


def compare(run: Any, float_onnx: Path, int8_onnx: Path, episodes: int) -> Int8Comparison:
    """Both files on the run's held-out evaluation (``episodes`` per setting, randomisation on and off)."""
    cfg = run.cfg
    groups = cfg.policy.actor_obs
    recorded: list[np.ndarray] = []
    results: dict[str, list[EvalResult]] = {"float": [], "int8": []}
    for randomize in (True, False):
        for kind, path in (("float", float_onnx), ("int8", int8_onnx)):
            record = recorded if (kind == "float" and randomize) else None
            env = make_eval_env(cfg.task, cfg.env, episodes, torch.device(cfg.device), randomize)
            try:
                result = evaluate_env(env, onnx_policy_fn(path, groups, record), seed=cfg.seed + EVAL_SEED_OFFSET)
            finally:
                env.close()
            results[kind].append(dataclasses.replace(result, tank_j=tank_of(cfg.env)))
    return Int8Comparison(results["float"], results["int8"], action_error(float_onnx, int8_onnx, recorded))


def action_error(float_onnx: Path, int8_onnx: Path, batches: list[np.ndarray]) -> ActionError:
    """Normalised command differences of the two files on the recorded inputs."""
    x = np.concatenate(batches, axis=0)
    a, b = OnnxPolicy(float_onnx), OnnxPolicy(int8_onnx)
    diff = np.abs(a.normalized_action(a.run_obs(x), a.reference(x)) - b.normalized_action(b.run_obs(x), b.reference(x)))
    return ActionError(len(x), float(diff.max()), float(diff.mean()), float(np.percentile(diff, 99)))
