"""Diffusion students against their teacher and a plain MLP behaviour-cloning baseline, side by side in one run.

What it measures, for each task (``panda-push``, ``panda-lift``) and demonstration count (100, 200 successful
episodes, state-based): the success of

- the teacher that made the demonstrations (the task's scripted expert; its privileged state machine, acting on
  the exact cube position),
- the same teacher acting on the cube estimate the students see (delayed, noisy, biased): roughly what a student
  that imitates it can reach from the onboard observations,
- a diffusion student (``configs/bc-diffusion.yaml``: U-Net, DDPM 100 / DDIM 10, To 2, Tp 16),
- an MLP student (``configs/bc-mlp.yaml``: the same windows and chunk, regressed),

the students trained on the same demonstrations with the same gradient-step budget, each evaluated over
``--episodes`` randomised episodes x 3 seeds in the batched simulator (success pooled, Wilson 95 % interval), and
each executed two ways: receding horizon (Ta 8 of Tp 16) and temporal ensembling (``--ensemble-decay``, default
``-0.3``, what ``configs/bc-diffusion.yaml`` ships: plan every step, average the still-valid plans, newer ones
weighted more).

Demonstrations are collected once into ``--data`` (200 per task; the 100-demo students train on the first 100), with
DART noise (``robot-rl collect --action-noise``: the teacher's executed actions are perturbed, its clean actions
recorded, so the demonstrations show recoveries). The noise per task (:data:`DART_NOISE`) was picked by MLP students
on 200 demonstrations, 2,000 steps (docs/benchmarks.md).

With ``--cameras wrist``, the demonstrations also hold ``--image-size`` wrist-camera images and every student is
trained twice on them, once on the observations alone and once also seeing the cameras (``policy.cameras``).

Run::

    python bench/imitation.py --steps 6000 --demos 200   # ~1 h on 2 CPU cores
    python bench/imitation.py --tasks panda-lift --demos 100 --steps 500   # a quick look
    python bench/imitation.py --tasks panda-lift --demos 200 --steps 2000 --policies mlp --cameras wrist
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import tempfile
import time
from pathlib import Path

import torch

import sim
from robot_rl.bench import format_table
from robot_rl.config import task_defaults
from robot_rl.evaluate import EVAL_SEED_OFFSET, evaluate_env, make_eval_env
from robot_rl.imitation.collect import collect
from robot_rl.imitation.config import load_bc_config
from robot_rl.imitation.evaluate import ChunkEvalResult
from robot_rl.imitation.train_bc import train_bc
from robot_rl.runs.bc import EVAL_SEEDS, BCRun
from sim.tasks.panda.experts import CUBE_SOURCES

DART_NOISE = {"panda-lift": 0.2, "panda-push": 0.05}
"""Default DART noise per task (standard deviation in normalised action units)."""


def evaluate_expert(task: str, episodes: int, cube: str) -> ChunkEvalResult:
    """The scripted expert's success over ``episodes`` x :data:`EVAL_SEEDS` (the students' evaluation starts),
    acting on the ``cube`` position source (``exact`` or ``onboard``)."""
    cfg = task_defaults(task)
    results = []
    for seed in EVAL_SEEDS:
        env = make_eval_env(task, cfg.env, episodes, torch.device("cpu"), True)
        expert = sim.get_task(task).expert_cls()(env, cube=cube)
        results.append(evaluate_env(env, lambda obs, e=expert: e.act(), seed=seed + EVAL_SEED_OFFSET))
        env.close()
    return ChunkEvalResult(results, list(EVAL_SEEDS))


def main(argv: list[str] | None = None) -> None:
    """Collect, train every student and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["panda-push", "panda-lift"])
    parser.add_argument("--demos", nargs="+", type=int, default=[100, 200])
    parser.add_argument("--policies", nargs="+", default=["diffusion", "mlp"])
    parser.add_argument("--steps", type=int, default=3000, help="gradient steps per student")
    parser.add_argument("--episodes", type=int, default=100, help="evaluation episodes per seed (3 seeds)")
    parser.add_argument(
        "--action-noise", type=float, default=None, help="DART noise for every task (default: DART_NOISE per task)"
    )
    parser.add_argument(
        "--ensemble-decay",
        type=float,
        default=-0.3,
        help="also evaluate every student with temporal ensembling at this weight (default: -0.3; nan: skip)",
    )
    parser.add_argument("--cameras", nargs="*", default=[], help="also record these cameras and train students on them")
    parser.add_argument("--image-size", type=int, default=64, help="camera image height and width (default: 64)")
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "robot-rl-bench-demos")
    args = parser.parse_args(argv)
    if args.ensemble_decay is not None and not math.isfinite(args.ensemble_decay):
        args.ensemble_decay = None
    torch.set_num_threads(2)
    rows = []
    runs = Path(tempfile.mkdtemp(prefix="robot-rl-bench-bc-"))
    for task in args.tasks:
        noise = DART_NOISE.get(task, 0.0) if args.action_noise is None else args.action_noise
        views = "".join(f"-{c}{args.image_size}" for c in args.cameras)
        data = args.data / f"{task}-{max(args.demos)}-dart{noise:g}{views}"
        if not data.exists():
            summary = collect(
                task,
                max(args.demos),
                data,
                num_envs=max(args.demos),
                action_noise=noise,
                quiet=True,
                cameras=tuple(args.cameras),
                image_size=args.image_size,
            )
            print(summary.lines()[1], flush=True)
        for cube in CUBE_SOURCES:
            teacher = evaluate_expert(task, args.episodes, cube)
            lo, hi = teacher.ci95
            rows.append(
                {
                    "task": task,
                    "policy": f"teacher (scripted, {cube} cube)",
                    "demos": "-",
                    "success": teacher.success_rate,
                    "ci95": f"{lo:.0%}-{hi:.0%}",
                    "train_s": "-",
                }
            )
            print(format_table(rows[-1:]), flush=True)
        sights = [[], args.cameras] if args.cameras else [[]]
        for demos, policy, cameras in ((d, p, c) for d in args.demos for p in args.policies for c in sights):
            seen = f" + {', '.join(cameras)} camera" if cameras else ""
            cfg = load_bc_config(
                policy,
                overrides=[
                    f"train.max_steps={args.steps}",
                    f"train.eval_episodes={args.episodes}",
                    "policy.ensemble_decay=null",  # first as configured without ensembling, then ensembled
                    f"policy.cameras=[{','.join(cameras)}]",
                ],
                dataset=str(data),
                max_episodes=demos,
                run_root=str(runs),
            )
            start = time.monotonic()
            result = train_bc(cfg, quiet=True, export=False)
            train_s = round(time.monotonic() - start)
            assert result.evaluation is not None
            evaluations = {f"Ta {cfg.policy.action_horizon}": result.evaluation}
            if args.ensemble_decay is not None:
                run = BCRun.load(result.run_dir)
                run.cfg.policy = dataclasses.replace(run.cfg.policy, ensemble_decay=args.ensemble_decay)
                evaluations[f"ensemble {args.ensemble_decay:g}"] = run.evaluate(args.episodes, EVAL_SEEDS)
            for execution, evaluation in evaluations.items():
                lo, hi = evaluation.ci95
                rows.append(
                    {
                        "task": task,
                        "policy": f"{policy}{seen}, {execution}",
                        "demos": demos,
                        "success": evaluation.success_rate,
                        "ci95": f"{lo:.0%}-{hi:.0%}",
                        "train_s": train_s,
                    }
                )
                print(format_table(rows[-1:]), flush=True)
    print(
        f"\n{args.steps} gradient steps per student, {args.episodes} episodes x {len(EVAL_SEEDS)} seeds each, "
        f"DART noise {args.action_noise if args.action_noise is not None else DART_NOISE}"
    )
    print(format_table(rows))


if __name__ == "__main__":
    sys.exit(main())
