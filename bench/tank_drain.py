"""How a ``panda-*`` policy spends its energy tank over an episode: the level, how much of each set-point jump the
tank lets through, and success, with the run's tank or another one.

The kept policy of a PPO run (``best.pt``, else ``checkpoint.pt``), mean action, one episode per world with
randomisation on, held-out seeds. The tank is the run's own (``env.passivity``) unless ``--t-max`` / ``--t-init`` /
``--power-w`` change it or ``--no-tank`` removes it (a tank too large to bind, e.g. ``--t-max 50000``, measures what
the policy would spend). Printed, at a few times into the episode over the worlds still in their first episode: the
mean and the 10th percentile of the level (J), the energy spent since the start (mean and 90th percentile, J: the
start level minus the level, so the damping's harvest is netted out), and the mean ``alpha`` (1: the tank let the
whole jump through); then the success rate.

Run::

    python bench/tank_drain.py runs/panda-push/<run> --episodes 512
    python bench/tank_drain.py runs/panda-push/<run> --t-max 50000 --t-init 25000   # what it would spend
    python bench/tank_drain.py runs/panda-push/<run> --t-init 80                    # the same tank, starting full
    python bench/tank_drain.py runs/panda-push/<run> --no-tank                      # success only
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np
import torch

from robot_rl.bench import format_table
from robot_rl.evaluate import EVAL_SEED_OFFSET, deterministic_policy, make_eval_env
from robot_rl.runs import PPORun
from sim.tasks.panda.passivity import PassivityConfig
from sim.vec_env import TaskConfigError

TIMES_S = (0.04, 0.5, 1.0, 2.0, 3.0, 4.0, 4.96)
"""Times into the episode at which the tank is reported, s (rounded to control periods)."""


def tank_config(run: PPORun, args: argparse.Namespace) -> PassivityConfig:
    """The run's tank with the command line's changes (``tank_max_j`` ``None`` with ``--no-tank``)."""
    tank: PassivityConfig = run.cfg.env.passivity
    if args.no_tank:
        return PassivityConfig()
    changes = {"tank_max_j": args.t_max, "tank_init_j": args.t_init, "tank_power_w": args.power_w}
    tank = dataclasses.replace(tank, **{k: v for k, v in changes.items() if v is not None})
    if tank.tank_max_j is None:
        raise SystemExit(f"{args.run} trained without a tank: give --t-max (J)")
    return tank


def main(argv: list[str] | None = None) -> None:
    """Run the episodes and print the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="PPO run folder of a panda-* task")
    p.add_argument("--episodes", type=int, default=512, help="held-out episodes (one world each)")
    p.add_argument("--t-max", type=float, help="tank T_max, J (default: the run's)")
    p.add_argument("--t-init", type=float, help="tank T_0 at each episode start, J (default: the run's)")
    p.add_argument("--power-w", type=float, help="tank refill, W (default: the run's)")
    p.add_argument("--no-tank", action="store_true", help="no tank in the loop: success only")
    p.add_argument("--seed", type=int, default=11, help="added to the held-out seed offset")
    args = p.parse_args(argv)
    if args.episodes < 1:
        p.error(f"--episodes must be >= 1, got {args.episodes}")
    run = PPORun.load(args.run)
    if not hasattr(run.cfg.env, "passivity"):
        p.error(f"{args.run} is a {run.cfg.task} run, which has no energy tank")
    try:
        tank = tank_config(run, args)
    except TaskConfigError as e:
        p.error(str(e))
    env = make_eval_env(run.cfg.task, dataclasses.replace(run.cfg.env, passivity=tank), args.episodes,
                        torch.device("cpu"), True)  # fmt: skip
    policy = deterministic_policy(run.model, run.cfg.policy.actor_obs)
    obs = env.reset(seed=args.seed + EVAL_SEED_OFFSET)
    tanks = env.tanks  # type: ignore[attr-defined]
    start = None if tanks is None else tanks.level.copy()
    at = {max(0, round(t / env.dt) - 1): t for t in TIMES_S}
    rows, ended = [], np.zeros(args.episodes, bool)
    success = np.zeros(args.episodes, bool)
    with torch.inference_mode():
        for step in range(env.max_episode_length):
            obs, _, terminated, truncated, info = env.step(policy(obs))
            done = (terminated | truncated).numpy() & ~ended
            live = ~ended & ~done
            if tanks is not None and step in at and live.any():
                level, spent = tanks.level[live], (start - tanks.level)[live]
                rows.append({
                    "t [s]": at[step], "worlds": int(live.sum()), "level mean [J]": float(level.mean()),
                    "level p10 [J]": float(np.percentile(level, 10)), "spent mean [J]": float(spent.mean()),
                    "spent p90 [J]": float(np.percentile(spent, 90)), "alpha mean": float(tanks.alpha[live].mean()),
                })  # fmt: skip
            if done.any():
                success[done] = info.success.numpy()[done]  # type: ignore[union-attr]
                ended |= done
    env.close()
    where = "no tank" if tanks is None else (
        f"tank T_max {tank.tank_max_j:g} J, T_0 {tank.initial_j:g} J, refill {tank.tank_power_w:g} W")  # fmt: skip
    print(f"{run.cfg.task} {args.run.name}: {args.episodes} held-out episodes, randomisation on, mean action, {where}")
    if rows:
        print(format_table(rows))
    print(f"success: {success.mean():.1%}")


if __name__ == "__main__":
    main()
