"""A gait plot for legged runs: which feet touch the ground over time, and how the base follows a held command.

One world (randomisation off, the held-out seed) walks under a fixed velocity command with the deterministic policy;
the plot shows the foot contact pattern (a gait diagram: bars where a foot is on the ground), the base velocities
against the command, and the trunk height. Tasks whose env offers ``hold_command`` and ``foot_contacts`` (the
quadruped) get one; others none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.evaluate import PolicyFn, make_eval_env
from robot_rl.logger import save_png

GAIT_COMMAND = (0.6, 0.0, 0.0)
"""The command the gait plot walks under: 0.6 m/s forward (m/s, m/s, rad/s)."""
GAIT_SECONDS = 4.0
"""Length of the plotted walk, s."""


def record_gait(
    task: str, env_cfg: Any, policy: PolicyFn, seed: int, command: tuple[float, float, float] = GAIT_COMMAND
) -> dict[str, np.ndarray] | None:
    """Walk one world for :data:`GAIT_SECONDS` (or until it falls) under ``command``.

    Returns:
        ``t [T]`` s, ``contacts [T, 4]`` bool, ``velocity [T, 3]`` (vx, vy m/s; yaw rate rad/s, base frame),
        ``height [T]`` m and ``command [3]``; ``None`` for a task without feet and velocity commands.
    """
    env = make_eval_env(task, env_cfg, 1, torch.device("cpu"), False)
    hold, contacts_fn = getattr(env, "hold_command", None), getattr(env, "foot_contacts", None)
    if hold is None or contacts_fn is None:
        env.close()
        return None
    hold(command)
    obs = env.reset(seed=seed)
    rows: dict[str, list[np.ndarray]] = {"contacts": [], "velocity": [], "height": []}
    for _ in range(round(GAIT_SECONDS / env.dt)):
        obs, _, terminated, truncated, _ = env.step(policy(obs))
        if bool((terminated | truncated).any()):
            break
        rows["contacts"].append(contacts_fn()[0].cpu().numpy())
        base = env.base_velocity()[0].cpu().numpy()  # type: ignore[attr-defined]
        rows["velocity"].append(base)
        rows["height"].append(env.base_height()[0].cpu().numpy())  # type: ignore[attr-defined]
    dt = env.dt
    env.close()
    out = {k: np.asarray(v) for k, v in rows.items()}
    out["t"] = np.arange(len(out["height"])) * dt
    out["command"] = np.asarray(command)
    return out


def plot_gait(
    trace: dict[str, np.ndarray], path: Path, title: str, legs: tuple[str, ...] = ("FR", "FL", "RR", "RL")
) -> None:
    """Save the gait diagram, base velocities against the command and the trunk height as a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t, dt = trace["t"], float(trace["t"][1] - trace["t"][0]) if len(trace["t"]) > 1 else 0.02
    fig, axes = plt.subplots(3, 1, figsize=(9, 7), sharex=True, gridspec_kw={"height_ratios": [1.2, 1.5, 1]})
    for i in range(len(legs)):
        on = trace["contacts"][:, i]
        starts = t[on]
        axes[0].broken_barh([(s, dt) for s in starts], (i - 0.4, 0.8), color="0.25")
    axes[0].set_yticks(range(len(legs)), legs)
    axes[0].invert_yaxis()
    axes[0].set_ylabel("foot on ground")
    names = ("vx [m/s]", "vy [m/s]", "yaw rate [rad/s]")
    for j, (name, colour) in enumerate(zip(names, ("C0", "C1", "C2"), strict=True)):
        axes[1].plot(t, trace["velocity"][:, j], color=colour, label=name)
        axes[1].axhline(trace["command"][j], color=colour, linestyle="--", linewidth=1)
    axes[1].set_ylabel("base velocity (dashed: command)")
    axes[1].legend(fontsize=8, ncol=3)
    axes[1].grid(alpha=0.3)
    axes[2].plot(t, trace["height"], color="C3")
    axes[2].set_ylabel("trunk height [m]")
    axes[2].set_xlabel("time [s]")
    axes[2].grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)
