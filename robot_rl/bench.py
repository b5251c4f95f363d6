"""Throughput measurements shared by ``bench/`` scripts and the ``robot-rl bench`` command.

``measure_env_steps`` times a task's :class:`~sim.vec_env.VecEnv` stepping with uniform random actions under
``torch.inference_mode()`` (or, with ``adapter=True``, the same through the numpy gymnasium adapter), after a
warm-up, and reports world steps per second (``num_envs`` x control steps / wall time). ``format_table`` prints rows
of figures as an aligned text table.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

import sim


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_env_steps(
    task: str,
    num_envs: int,
    device: str | torch.device = "cpu",
    seconds: float = 2.0,
    *,
    adapter: bool = False,
    env_cfg: Any | None = None,
    warmup_s: float | None = None,
    seed: int = 0,
    compile: bool = False,
) -> float:
    """World steps per second of ``task`` with ``num_envs`` worlds on ``device`` under random actions.

    Args:
        task: Registered task name.
        num_envs: Number of parallel worlds.
        device: Torch device of the env.
        seconds: Length of the timed part (at least 3 steps are timed).
        adapter: Step through :class:`sim.adapters.GymVecEnv` with numpy actions (adds the numpy conversions).
        env_cfg: The task's config (``None``: its defaults).
        warmup_s: Untimed warm-up (``None``: 20 % of ``seconds``, at least 3 steps either way).
        seed: Seed of the env and of the random actions.
        compile: Call :meth:`sim.vec_env.VecEnv.compile` first (the compile happens in the untimed warm-up).

    Returns:
        ``num_envs * timed_steps / elapsed_seconds``.
    """
    dev = torch.device(device)
    env = sim.make(task, num_envs, dev, env_cfg, seed=seed)
    if compile:
        env.compile()
    warmup = 0.2 * seconds if warmup_s is None else warmup_s
    try:
        with torch.inference_mode():
            if adapter:
                step = _adapter_stepper(env, seed)
            else:
                env.reset(seed=seed)
                gen = torch.Generator(device=dev)
                gen.manual_seed(seed)
                shape = (num_envs, env.num_actions)

                def step() -> None:
                    env.step(torch.rand(shape, generator=gen, device=dev) * 2.0 - 1.0)

            _run_for(step, warmup, dev)
            steps, elapsed = _run_for(step, seconds, dev)
    finally:
        env.close()
    return num_envs * steps / elapsed


def _adapter_stepper(env: sim.VecEnv, seed: int) -> Any:
    from sim.adapters.gymnasium import GymVecEnv

    gym_env = GymVecEnv(env)
    gym_env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    shape = (env.num_envs, env.num_actions)

    def step() -> None:
        gym_env.step(rng.uniform(-1.0, 1.0, shape).astype(np.float32))

    return step


def _run_for(step: Any, seconds: float, device: torch.device, min_steps: int = 3) -> tuple[int, float]:
    """Call ``step`` until ``seconds`` have passed (and at least ``min_steps`` times); ``(steps, elapsed_s)``."""
    _sync(device)
    start = time.perf_counter()
    steps, elapsed = 0, 0.0
    while steps < min_steps or elapsed < seconds:
        step()
        steps += 1
        if steps % 8 == 0 or steps <= min_steps:  # one sync per few steps keeps the GPU queue honest and cheap
            _sync(device)
            elapsed = time.perf_counter() - start
    _sync(device)
    return steps, time.perf_counter() - start


def env_steps_rows(
    task: str, num_envs: Sequence[int], devices: Sequence[str], seconds: float, compile: bool = False
) -> list[dict[str, Any]]:
    """One row of world steps/s per ``(device, num_envs)``, with the per-world time in microseconds.

    With ``compile``, each row also measures the env after :meth:`~sim.vec_env.VecEnv.compile`, right after the
    eager figure, and gives the ratio.
    """
    rows: list[dict[str, Any]] = []
    for device in devices:
        for n in num_envs:
            sps = measure_env_steps(task, n, device, seconds)
            rows.append({"device": device, "num_envs": n, "steps/s": sps, "us/world-step": 1e6 / sps})
            if compile:
                compiled = measure_env_steps(task, n, device, seconds, compile=True, warmup_s=max(1.0, seconds))
                rows[-1].update({"compiled steps/s": compiled, "compiled / eager": compiled / sps})
    return rows


def adapter_overhead_rows(task: str, num_envs: int = 1024, seconds: float = 2.0) -> list[dict[str, Any]]:
    """World steps/s on CPU through the torch ``VecEnv`` and through the gymnasium adapter, measured back to back."""
    torch_sps = measure_env_steps(task, num_envs, "cpu", seconds)
    gym_sps = measure_env_steps(task, num_envs, "cpu", seconds, adapter=True)
    return [
        {"interface": "sim.VecEnv (torch)", "num_envs": num_envs, "steps/s": torch_sps, "ratio": 1.0},
        {"interface": "GymVecEnv (numpy)", "num_envs": num_envs, "steps/s": gym_sps, "ratio": gym_sps / torch_sps},
    ]


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, int | np.integer):
        return f"{value:,}"
    if isinstance(value, float | np.floating):
        x = float(value)
        if not np.isfinite(x):
            return str(x)
        if abs(x) >= 1000:
            return f"{x:,.0f}"
        return f"{x:.3g}" if abs(x) >= 0.01 or x == 0 else f"{x:.2e}"
    return str(value)


def format_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """An aligned plain-text table of ``rows`` (numbers right-aligned, thousands separated, missing cells ``-``).

    Args:
        rows: One mapping per row.
        columns: Column order (``None``: keys in order of first appearance).
    """
    if columns is None:
        columns = list(dict.fromkeys(k for row in rows for k in row))
    cells = [[_fmt(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    numeric = [all(isinstance(row.get(c), int | float | np.number) for row in rows if c in row) for c in columns]

    def line(items: Sequence[str]) -> str:
        parts = [s.rjust(w) if num else s.ljust(w) for s, w, num in zip(items, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    out = [line(list(columns)), line(["-" * w for w in widths])]
    out.extend(line(r) for r in cells)
    return "\n".join(out)
