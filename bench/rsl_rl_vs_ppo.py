"""rsl_rl (``rsl-rl-lib``) against robot-rl's own PPO: the same task, networks, PPO settings and budget, time to the
task's success criterion, side by side.

What it measures, per seed: wall-clock seconds until each trainer's deterministic policy first meets the task's
criterion in the same evaluation — robot-rl's runner evaluates every ``runner.eval_interval`` iterations on
``runner.eval_episodes`` episodes of its selection seeds; rsl_rl's ``OnPolicyRunner`` (through
:class:`sim.adapters.rsl_rl.RslRlVecEnv`, configured by :func:`robot_rl.algorithms.rsl_rl.runner_config` from the
same training file) learns in chunks of ``eval_interval`` iterations and is evaluated the same way in between, by
``robot_rl.evaluate.evaluate_env`` on the same seeds. Evaluation time counts for both. Both stop at the criterion or
at ``--max-time``. Ratio > 1: rsl_rl needs longer. What differs beyond the implementations is listed in
:mod:`robot_rl.algorithms.rsl_rl` (value clipping, std bounds, the learning-rate cap).

Run::

    python bench/rsl_rl_vs_ppo.py --task cartpole-balance --seeds 0 1 2 3 4 --max-time 120
    python bench/rsl_rl_vs_ppo.py --task quadrotor-hover --seeds 0 1 2 --max-time 120
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import statistics
import sys
import tempfile
import time
from typing import Any

import torch
from rsl_rl.runners import OnPolicyRunner as RslRunner

import sim
from robot_rl.algorithms.rsl_rl import runner_config, unmapped
from robot_rl.bench import format_table
from robot_rl.config import TrainConfig, load_config
from robot_rl.evaluate import SELECTION_SEED_OFFSET, evaluate_env, make_eval_env
from robot_rl.runner import OnPolicyRunner
from robot_rl.runs import new_run_dir
from sim.adapters.rsl_rl import RslRlVecEnv


def run_robot_rl(cfg: TrainConfig) -> dict[str, Any]:
    """robot-rl's runner on ``cfg`` (stops at the criterion or the budget)."""
    result = OnPolicyRunner(cfg, new_run_dir(cfg), quiet=True).train()
    return {"met": result.criterion_met, "time_to_criterion_s": result.time_to_criterion_s,
            "env_steps": result.env_steps, "wall_s": result.wall_time_s}  # fmt: skip


def run_rsl_rl(cfg: TrainConfig, max_time: float) -> dict[str, Any]:
    """rsl_rl's runner on the same task and settings, evaluated like robot-rl's every ``eval_interval`` iterations."""
    torch.manual_seed(cfg.seed)
    start = time.perf_counter()
    env = RslRlVecEnv(sim.make(cfg.task, cfg.num_envs, cfg.device, cfg.env, cfg.seed), seed=cfg.seed)
    if cfg.runner.spread_episode_starts:
        env.env.spread_episode_starts()
    with contextlib.redirect_stdout(io.StringIO()):  # it prints both networks when built
        runner = RslRunner(env, runner_config(cfg), log_dir=None, device=cfg.device)
    device = torch.device(cfg.device)
    eval_env = make_eval_env(cfg.task, cfg.env, cfg.runner.eval_episodes, device, randomize=True)
    iterations, met, ttc = 0, False, None
    while time.perf_counter() - start < max_time and iterations < cfg.runner.max_iterations:
        runner.learn(cfg.runner.eval_interval)
        iterations += cfg.runner.eval_interval
        policy = runner.get_inference_policy(cfg.device)

        def act(obs: dict[str, torch.Tensor], policy: Any = policy) -> torch.Tensor:
            return policy(obs).clamp(-1.0, 1.0)

        result = evaluate_env(eval_env, act, seed=cfg.seed + SELECTION_SEED_OFFSET)
        runner.alg.train_mode()
        if eval_env.criterion(result.episodes)[0]:
            met, ttc = True, time.perf_counter() - start
            break
    env.close()
    eval_env.close()
    steps = iterations * cfg.num_envs * cfg.ppo.num_steps
    return {"met": met, "time_to_criterion_s": ttc, "env_steps": steps, "wall_s": time.perf_counter() - start}


def median_ttc(rows: list[dict[str, Any]]) -> float:
    """Median time to criterion; a seed that never met it counts as ``inf``."""
    return statistics.median(r["time_to_criterion_s"] if r["met"] else math.inf for r in rows)


def main(argv: list[str] | None = None) -> None:
    """Both trainers per seed, then medians and the ratio."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="cartpole-balance")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--max-time", type=float, default=120.0, help="budget per trainer and seed, s")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (both)")
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    rows = []
    skipped = unmapped(load_config(args.task, None, args.set))
    if skipped:
        print(f"rsl_rl trains without {', '.join(skipped)} (no equivalent; robot-rl's PPO uses them)")
    with tempfile.TemporaryDirectory(prefix="rsl-vs-ppo-") as root:
        for seed in args.seeds:
            base = [*args.set, f"seed={seed}", f"runner.max_time_s={args.max_time}", f"run_root={root}"]
            cfg = load_config(args.task, None, base)
            ours = run_robot_rl(cfg)
            theirs = run_rsl_rl(load_config(args.task, None, base), args.max_time)
            for name, r in (("robot-rl PPO", ours), ("rsl_rl 5.5.1", theirs)):
                rows.append({"seed": seed, "trainer": name, **r})
                print(format_table([rows[-1]]) if len(rows) == 1 else format_table([rows[-1]]).splitlines()[-1])
                sys.stdout.flush()
    a = median_ttc([r for r in rows if r["trainer"] == "robot-rl PPO"])
    b = median_ttc([r for r in rows if r["trainer"] == "rsl_rl 5.5.1"])
    print(f"\n{args.task}, {len(args.seeds)} seeds, budget {args.max_time:g} s each: median time to criterion "
          f"robot-rl {a:.1f} s, rsl_rl {b:.1f} s, ratio rsl_rl / robot-rl {b / a:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
