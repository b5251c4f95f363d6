"""What the MuJoCo step (``env.physics_dt``) changes in a Panda task: the scripted expert's success, the env steps per
second, and a trained policy's success, side by side at each step in one run.

For each ``--dt`` (s; a whole divisor of the 40 ms control period), with randomisation on:

- ``expert``: the task's scripted expert (exact cube; ``sim/tasks/panda/experts.py``) over ``--episodes`` episodes:
  does the physics at this step still do what the task needs (a grasp that holds, a push that slides)?
- ``steps/s``: world steps per second of the task at ``--num-envs`` worlds with random actions
  (``robot_rl.bench.measure_env_steps``), and the ratio to the first ``--dt``;
- with ``--run``: that PPO run's kept policy (mean action, its own tank) over ``--episodes`` held-out episodes, with
  randomisation on and off, on the run's own held-out seeds (at its own step: the run's ``eval.yaml``): a policy
  trained at a coarse step, judged at a fine one (and the other way round).

Run::

    python bench/physics_step.py --task panda-push --dt 0.004 0.008 --run runs/panda-push/<run>
    python bench/physics_step.py --task panda-lift --dt 0.004 0.008 [--set env.finger_armature=0.2]

``--set`` changes the task's defaults, which the expert and the steps/s measurement run in (a ``--run`` policy keeps
its run's settings but for the step).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import torch

import sim
from robot_rl.bench import format_table, measure_env_steps
from robot_rl.checkpoint import CheckpointError
from robot_rl.config import ConfigError, task_defaults
from robot_rl.evaluate import EVAL_SEED_OFFSET, deterministic_policy, evaluate_env, make_eval_env
from robot_rl.runs import PPORun


def expert_success(task: str, env_cfg: Any, episodes: int, seed: int) -> float:
    """Share of ``episodes`` randomised episodes (one world each) the task's scripted expert succeeds in."""
    env = make_eval_env(task, env_cfg, episodes, torch.device("cpu"), True)
    expert = sim.get_task(task).expert_cls()(env)
    env.reset(seed=seed)
    expert.reset()
    success, ended = torch.zeros(episodes, dtype=torch.bool), torch.zeros(episodes, dtype=torch.bool)
    with torch.inference_mode():
        for _ in range(env.max_episode_length):
            _, _, terminated, truncated, info = env.step(expert.act())
            done = (terminated | truncated) & ~ended
            if bool(done.any()):
                success[done] = info.success[done]  # type: ignore[index]
                ended |= done
    env.close()
    return float(success.float().mean())


def main(argv: list[str] | None = None) -> None:
    """Measure each step and print one table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="panda-push", help="a Panda task with a scripted expert")
    p.add_argument("--dt", type=float, nargs="+", default=[0.004, 0.008], help="MuJoCo steps to compare, s")
    p.add_argument("--episodes", type=int, default=256, help="episodes per expert and policy evaluation")
    p.add_argument("--num-envs", type=int, default=512, help="worlds of the steps/s measurement (training: 512)")
    p.add_argument("--seconds", type=float, default=3.0, help="timed seconds per steps/s measurement")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a task default for the expert and steps/s, e.g. env.finger_armature=0.2")  # fmt: skip
    p.add_argument("--run", type=Path, help="also evaluate this PPO run's kept policy at each step")
    p.add_argument("--seed", type=int, help="added to the held-out seed offset (default: the run's seed, so the "
                   "policy at its own step is the run's held-out evaluation; 0 without --run)")  # fmt: skip
    args = p.parse_args(argv)
    if args.episodes < 1 or args.num_envs < 1:
        p.error("--episodes and --num-envs must be >= 1")
    try:
        run = PPORun.load(args.run) if args.run else None
    except CheckpointError as e:
        p.error(str(e))
    if run is not None and run.cfg.task != args.task:
        p.error(f"{args.run} is a {run.cfg.task} run, not {args.task}")
    try:
        base = task_defaults(args.task, args.set).env
    except ConfigError as e:
        p.error(str(e))
    seed = (args.seed if args.seed is not None else run.cfg.seed if run else 0) + EVAL_SEED_OFFSET
    rows: list[dict[str, Any]] = []
    for dt in args.dt:
        try:
            cfg = dataclasses.replace(base, physics_dt=dt)
        except (ValueError, TypeError) as e:
            p.error(f"--dt {dt}: {e}")
        row: dict[str, Any] = {"physics_dt [ms]": 1000 * dt, "substeps": cfg.substeps}
        row["expert"] = expert_success(args.task, cfg, args.episodes, seed)
        row["steps/s"] = measure_env_steps(args.task, args.num_envs, "cpu", args.seconds, env_cfg=cfg)
        row["steps/s ratio"] = row["steps/s"] / rows[0]["steps/s"] if rows else 1.0
        if run is not None:
            run_cfg = dataclasses.replace(run.cfg.env, physics_dt=dt)
            policy = deterministic_policy(run.model, run.cfg.policy.actor_obs)
            for randomize, name in ((True, "policy, DR on"), (False, "policy, DR off")):
                env = make_eval_env(run.cfg.task, run_cfg, args.episodes, torch.device("cpu"), randomize)
                row[name] = evaluate_env(env, policy, seed).summary()["success_rate"]
                env.close()
        rows.append(row)
    trained = f"; the policy of {args.run} trained at {1000 * run.cfg.env.physics_dt:g} ms" if run else ""
    print(f"{args.task}: randomisation on unless said, {args.episodes} episodes per cell{trained}")
    print(format_table(rows))


if __name__ == "__main__":
    main()
