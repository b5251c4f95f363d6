"""What a ``panda-push`` policy's failures are: where the goal was, how close the cube came, whether it left again.

The kept policy of a PPO run (``best.pt``, else ``checkpoint.pt``) pushes in one world per episode with
randomisation on (its own tank, as trained), on held-out seeds, mean action. Each world's first episode is followed
step by step (the cube-to-goal distance in the table plane). Printed, for all episodes and by where the goal lies
from the cube's start (its direction in the robot's base frame: away from the robot is +x, towards it -x, sideways
+-y; and its distance): the success rate, and of the failures the share that

- ended within 1.6 x the success distance (near misses: 5-8 cm at the task's 5 cm),
- had the cube within the success distance earlier and left it again,
- were still bringing the cube closer over the last 0.5 s (out of time),
- never moved the cube 2 cm, or lost it off the table;

where the failures leave the cube (medians, cm: along the line from the cube's start to the goal, negative short of
the goal; and across it; and across it for those that had been in), and the median time a successful episode first
has the cube within the success distance.

Run::

    python bench/push_failures.py runs/panda-push/<run> --episodes 1024
"""

from __future__ import annotations

import argparse
import itertools
import math
from pathlib import Path

import numpy as np
import torch

from robot_rl.bench import format_table
from robot_rl.evaluate import EVAL_SEED_OFFSET, deterministic_policy, make_eval_env
from robot_rl.runs import PPORun

NEAR_MISS = 1.6
"""A failure ending within this multiple of the success distance is a near miss."""
LATE_S = 0.5
"""A failure still bringing the cube closer (by 1 cm or more) over this last stretch of its episode ran out of time."""
DIRECTIONS = (("away (+x)", -45.0, 45.0), ("left (+y)", 45.0, 135.0), ("towards (-x)", 135.0, 225.0),
              ("right (-y)", 225.0, 315.0))  # fmt: skip
"""Goal direction bins from the cube's start, degrees from the base frame's +x (counter-clockwise)."""


def follow(run: PPORun, episodes: int, seed: int) -> dict[str, np.ndarray]:
    """One episode per world: the goal's direction (deg) and distance (m) from the cube's start, the distance per
    step ``[T, N]`` (NaN after the episode ended), the final distance, success, whether it ended early, how far the
    cube ever got from its start (m), where it ended relative to the goal (m; along the line from its start to the
    goal and across it, one control period before the end), and the control period (s)."""
    env = make_eval_env(run.cfg.task, run.cfg.env, episodes, torch.device("cpu"), True)
    policy = deterministic_policy(run.model, run.cfg.policy.actor_obs)
    obs = env.reset(seed=seed)
    start = env.cube_pos[:, :2].numpy().copy()  # type: ignore[attr-defined]
    to_goal = env.goal.numpy() - start  # type: ignore[attr-defined]
    steps = env.max_episode_length
    dist = np.full((steps, episodes), np.nan)
    final, success, early = np.full(episodes, np.nan), np.zeros(episodes, bool), np.zeros(episodes, bool)
    ended, moved, last_xy = np.zeros(episodes, bool), np.zeros(episodes), start.copy()
    with torch.inference_mode():
        for t in range(steps):
            obs, _, terminated, truncated, info = env.step(policy(obs))
            done = (terminated | truncated).numpy() & ~ended
            now = env._goal_distance().numpy()  # type: ignore[attr-defined]  # the next episode's where done
            going = ~ended & ~done
            dist[t, going] = now[going]
            xy = env.cube_pos[:, :2].numpy()  # type: ignore[attr-defined]
            moved[going] = np.maximum(moved[going], np.linalg.norm(xy - start, axis=1)[going])
            last_xy[going] = xy[going]
            if done.any():
                last = info.episode_metrics["final_goal_distance"].numpy()
                dist[t, done], final[done] = last[done], last[done]
                success[done] = info.success.numpy()[done]  # type: ignore[union-attr]
                early[done] = terminated.numpy()[done]
                ended |= done
    period = env.dt
    env.close()
    angle = np.degrees(np.arctan2(to_goal[:, 1], to_goal[:, 0])) % 360.0
    line = to_goal / np.maximum(np.linalg.norm(to_goal, axis=1, keepdims=True), 1e-9)
    off = last_xy - (start + to_goal)
    along, across = (off * line).sum(1), off[:, 0] * line[:, 1] - off[:, 1] * line[:, 0]
    return {"angle": angle, "distance": np.linalg.norm(to_goal, axis=1), "dist": dist, "final": final,
            "success": success, "early": early, "moved": moved, "along": along, "across": np.abs(across),
            "period": np.array(period)}  # fmt: skip


def summarise(name: str, r: dict[str, np.ndarray], mask: np.ndarray, bar: float) -> dict[str, object]:
    """One row: success and the failure shares (see the module docstring) of the episodes in ``mask``."""
    succ, fail = r["success"] & mask, ~r["success"] & mask
    dist, period = r["dist"], float(r["period"])
    within = np.nan_to_num(dist, nan=np.inf) < bar
    first = np.where(within.any(0), within.argmax(0), -1)
    late = max(1, round(LATE_S / period))
    closing = np.zeros_like(fail)
    for i in np.flatnonzero(fail):
        d = dist[:, i][~np.isnan(dist[:, i])]
        closing[i] = len(d) > late and d[-late - 1] - d[-1] > 0.01
    n_fail, left = max(int(fail.sum()), 1), fail & (first >= 0)
    return {
        "goals": name,
        "episodes": int(mask.sum()),
        "success": float(succ.sum() / max(int(mask.sum()), 1)),
        "fail: near miss": float((fail & (r["final"] < NEAR_MISS * bar)).sum() / n_fail),
        "fail: was in, left": float(left.sum() / n_fail),
        "fail: still closing": float(closing.sum() / n_fail),
        "fail: cube unmoved": float((fail & (r["moved"] < 0.02)).sum() / n_fail),
        "fail: cube lost": float((fail & r["early"]).sum() / n_fail),
        "fail: along [cm]": float(100 * np.median(r["along"][fail])) if fail.any() else math.nan,
        "fail: across [cm]": float(100 * np.median(r["across"][fail])) if fail.any() else math.nan,
        "left: across [cm]": float(100 * np.median(r["across"][left])) if left.any() else math.nan,
        "success: first in [s]": float(np.median(first[succ] + 1) * period) if succ.any() else math.nan,
    }


def main(argv: list[str] | None = None) -> None:
    """Follow the episodes and print the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="PPO run folder of panda-push")
    p.add_argument("--episodes", type=int, default=1024, help="held-out episodes (one world each)")
    p.add_argument("--seed", type=int, default=7, help="added to the held-out seed offset")
    args = p.parse_args(argv)
    if args.episodes < 1:
        p.error(f"--episodes must be >= 1, got {args.episodes}")
    run = PPORun.load(args.run)
    if run.cfg.task != "panda-push":
        p.error(f"{args.run} is a {run.cfg.task} run; this analysis is for panda-push")
    r = follow(run, args.episodes, args.seed + EVAL_SEED_OFFSET)
    bar = float(run.cfg.env.success_distance)
    rows = [summarise("all", r, np.ones_like(r["success"]), bar)]
    for name, lo, hi in DIRECTIONS:
        rows.append(summarise(name, r, (r["angle"] - lo) % 360.0 < hi - lo, bar))
    edges = np.quantile(r["distance"], [0.0, 1 / 3, 2 / 3, 1.0])
    for lo, hi in itertools.pairwise(edges):
        name = f"{100 * lo:.0f}-{100 * hi:.0f} cm away"
        rows.append(summarise(name, r, (r["distance"] >= lo) & (r["distance"] <= hi), bar))
    print(f"{run.cfg.task} {args.run.name}: {args.episodes} held-out episodes, randomisation on, mean action")
    print(format_table(rows))


if __name__ == "__main__":
    main()
