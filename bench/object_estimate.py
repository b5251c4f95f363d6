"""How good the cube estimate must be: a cube task's trained policy against the tracker's per-episode bias and noise.

The onboard cube position (``object_position``) is a camera tracker's estimate: one control period old, with white
noise (``env.noise.std.object_pos``, m) and a constant offset drawn per episode (``env.noise.bias_std.object_pos``, m;
on a robot: the camera's extrinsic calibration error). This evaluates a PPO run's kept policy (mean action, its own
tank and physics step, randomisation on) on the run's own held-out seeds with the bias standard deviation set to each
``--bias`` and the noise to each ``--noise``: the row at the run's own values is the run's ``eval.yaml``.

Run::

    python bench/object_estimate.py runs/panda-lift/<run> --bias 0 0.003 0.005 0.01
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from robot_rl.bench import format_table
from robot_rl.checkpoint import CheckpointError
from robot_rl.evaluate import EVAL_SEED_OFFSET, deterministic_policy, evaluate_env, make_eval_env
from robot_rl.runs import PPORun
from sim.typed_config import ConfigError

SIGNAL = "object_pos"
"""The cube tracker's signal in ``env.noise``."""


def main(argv: list[str] | None = None) -> None:
    """Evaluate each bias and noise setting and print one table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="a PPO run folder of a cube task (panda-push, panda-lift)")
    p.add_argument("--bias", type=float, nargs="+", help="per-episode bias std of the cube estimate, m "
                   "(default: the run's)")  # fmt: skip
    p.add_argument("--noise", type=float, nargs="+", help="white-noise std of the cube estimate, m "
                   "(default: the run's)")  # fmt: skip
    p.add_argument("--episodes", type=int, default=256, help="episodes per setting")
    args = p.parse_args(argv)
    if args.episodes < 1:
        p.error("--episodes must be >= 1")
    for name in ("bias", "noise"):
        values = getattr(args, name) or []
        if any(not v >= 0 for v in values):  # also refuses NaN
            p.error(f"--{name} values must be >= 0 m, got {values}")
    try:
        run = PPORun.load(args.run)
    except CheckpointError as e:
        p.error(str(e))
    noise = getattr(run.cfg.env, "noise", None)
    if noise is None or SIGNAL not in noise.std:
        p.error(f"{args.run} is a {run.cfg.task} run: its onboard observation has no {SIGNAL} estimate")
    policy = deterministic_policy(run.model, run.cfg.policy.actor_obs)
    seed = run.cfg.seed + EVAL_SEED_OFFSET
    rows: list[dict[str, Any]] = []
    for bias in args.bias or [noise.bias_std.get(SIGNAL, 0.0)]:
        for std in args.noise or [noise.std[SIGNAL]]:
            try:  # the run's own config with these two values, validated as `robot-rl eval --set` validates them
                run.set_env([f"env.noise.bias_std.{SIGNAL}={bias!r}", f"env.noise.std.{SIGNAL}={std!r}"])
            except ConfigError as e:
                p.error(str(e))
            env = make_eval_env(run.cfg.task, run.cfg.env, args.episodes, torch.device("cpu"), True)
            success = evaluate_env(env, policy, seed).summary()["success_rate"]
            env.close()
            row = {"bias std [mm]": 1000 * bias, "noise std [mm]": 1000 * std, "success [%]": round(100 * success, 1)}
            rows.append(row)
    trained = f"{1000 * noise.bias_std.get(SIGNAL, 0.0):g} mm bias, {1000 * noise.std[SIGNAL]:g} mm noise"
    print(f"{args.run} ({run.cfg.task}, trained with {trained}): randomisation on, {args.episodes} held-out episodes")
    print(format_table(rows))


if __name__ == "__main__":
    main()
