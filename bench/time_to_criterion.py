"""Time to criterion: robot-rl's own PPO trainer against the Stable-Baselines3 baseline, side by side.

What it measures: for each seed, wall-clock seconds until robot-rl's ``OnPolicyRunner`` first meets the task's
success criterion in its periodic evaluation (``TrainResult.time_to_criterion_s``; config from
``robot_rl.config.load_config(task, None, overrides)`` with ``seed`` and ``runner.max_time_s`` set), within a budget
of ``--max-time`` seconds per seed. The median over seeds is printed (a seed that never meets it counts as above the
budget). Then, unless ``--no-sb3``, ``bench/sb3_baseline.py`` trains the same task config with the same budget and
seeds, and a ratio table compares the two: time to criterion where reached, and the evaluation figures (crash-free
rate, tail position error, success rate, return) of a final evaluation of each side's policy at the end of its budget
(same evaluation: 256 randomised episodes, deterministic policy, seeded as the runner seeds it). Runs go to a
temporary folder that is deleted afterwards. Both sides share the process and ``torch.set_num_threads(--threads)``,
and the OpenMP wait the ``robot-rl`` command chooses (:mod:`robot_rl.threads`: a short spin, or ``PASSIVE`` when
other processes keep the CPUs busy; unless ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY`` is already in the
environment), so the times are what a user's ``robot-rl train`` gets. Until 2026-11-24 this script ran with
OpenMP's own default, and the figures in docs/benchmarks.md were taken with ``OMP_WAIT_POLICY=PASSIVE`` in front of
it: 1.6x slower at 2,048 worlds.

Run::

    python bench/time_to_criterion.py --seeds 0 1 2 --max-time 300
    python bench/time_to_criterion.py --seeds 0 --max-time 15 --set num_envs=1024 --sb3-eval-every 5
    python bench/time_to_criterion.py --seeds 0 1 2 3 4 --no-sb3 --paper-checkout l2f --paper-mkl-dir mkl/lib/cmake/mkl

The paper's training: with ``--paper-checkout PATH`` (a checkout of arplaboratory/learning-to-fly; how to get one:
``bench/paper_training.py``) its TD3 training is built and run once after each robot-rl seed, so both see the same
machine, and a table gives robot-rl's time to first success and to flight quality against it, with issue 32's
targets. Without the path the script says that the paper's training was not run.
"""

from __future__ import annotations

import os

from robot_rl.threads import busy_cores, openmp_environment

os.environ.update(openmp_environment(os.environ, busy_cores()))  # as `robot-rl` decides it; before torch loads

import argparse
import math
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ is a folder of scripts, not a package

from paper_training import PAPER_STEPS, PaperBuild, build_paper_training, run_paper_training
from sb3_baseline import SB3Result, eval_figures, run_sb3_baseline

from robot_rl.bench import format_table
from robot_rl.config import load_config
from robot_rl.runner import OnPolicyRunner
from robot_rl.runs import new_run_dir
from robot_rl.runs.ppo import PPORun

FIGURES = ("crash_free_rate", "tail_position_error_m", "success_rate", "return_mean")
FIRST_SUCCESS_TARGET_S = 12.0  # issue 32: median over >= 5 seeds on the development machine (2 cores)
QUALITY_TARGET_S = 60.0


def run_robot_rl(task: str, seed: int, max_time: float, overrides: list[str], root: Path) -> dict[str, Any]:
    """Train one seed with robot-rl's runner; one row of figures (final evaluation at the end of the budget)."""
    cfg = load_config(task, None, [*overrides, f"seed={seed}", f"runner.max_time_s={max_time}", f"run_root={root}"])
    runner = OnPolicyRunner(cfg, new_run_dir(cfg), quiet=True)
    result = runner.train()
    runner.model.load_state_dict(PPORun.load(runner.run_dir).model.state_dict())  # the kept policy (best.pt)
    final = runner.evaluate(randomize=True)  # on held-out seeds, never used to choose it
    return {
        "seed": seed,
        "met": result.criterion_met,
        "time_to_criterion_s": result.time_to_criterion_s,
        "time_to_quality_s": result.time_to_quality_s,
        "wall_s": result.wall_time_s,
        "env_steps": result.env_steps,
        "steps/s": result.env_steps / max(result.wall_time_s, 1e-9),
        **{k: v for k, v in eval_figures(final).items() if k != "criterion"},
    }


def sb3_row(result: SB3Result) -> dict[str, Any]:
    """The same row for an SB3 baseline run."""
    figures = eval_figures(result.last_eval) if result.last_eval is not None else {}
    return {
        "seed": result.seed,
        "met": result.criterion_met,
        "time_to_criterion_s": result.time_to_criterion_s,
        "wall_s": result.wall_time_s,
        "env_steps": result.env_steps,
        "steps/s": result.env_steps / max(result.wall_time_s, 1e-9),
        **{k: v for k, v in figures.items() if k != "criterion"},
    }


def median_ttc(rows: list[dict[str, Any]]) -> float:
    """Median time to criterion; a seed that never met it counts as ``inf``."""
    return statistics.median(r["time_to_criterion_s"] if r["met"] else math.inf for r in rows)


def median_of(rows: list[dict[str, Any]], key: str) -> float:
    """Median of one figure over seeds (``nan`` where absent)."""
    vals = [float(r[key]) for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else math.nan


def comparison_rows(ours: list[dict[str, Any]], sb3: list[dict[str, Any]], budget: float) -> list[dict[str, Any]]:
    """Side-by-side medians and the ratio SB3 / robot-rl (for time to criterion: how many times longer SB3 needs)."""
    rows: list[dict[str, Any]] = []
    a, b = median_ttc(ours), median_ttc(sb3)
    rows.append(
        {
            "figure (median over seeds)": "time to criterion [s]",
            "robot-rl": a if math.isfinite(a) else f"> {budget:g}",
            "sb3": b if math.isfinite(b) else f"> {budget:g}",
            "sb3 / robot-rl": b / a if math.isfinite(a) and math.isfinite(b) else None,
        }
    )
    rows.append(
        {
            "figure (median over seeds)": "seeds meeting criterion",
            "robot-rl": f"{sum(r['met'] for r in ours)}/{len(ours)}",
            "sb3": f"{sum(r['met'] for r in sb3)}/{len(sb3)}",
        }
    )
    for key in ("steps/s", *FIGURES):
        x, y = median_of(ours, key), median_of(sb3, key)
        ratio = y / x if math.isfinite(x) and math.isfinite(y) and x != 0 else None
        name = "env steps/s" if key == "steps/s" else f"final eval {key}"
        rows.append({"figure (median over seeds)": name, "robot-rl": x, "sb3": y, "sb3 / robot-rl": ratio})
    return rows


def paper_rows(ours: list[dict[str, Any]], paper_s: list[float], budget: float) -> list[dict[str, Any]]:
    """robot-rl's times to first success and to flight quality beside the paper's training, medians over seeds.

    ``paper_s`` holds one timing of the paper's training per robot-rl seed, taken right after it; a seed that never
    reached a figure counts as above the budget (``inf``) in its median.
    """

    def median_time(key: str) -> float:
        return statistics.median(r[key] if r.get(key) is not None else math.inf for r in ours)

    paper = statistics.median(paper_s)
    rows = []
    for name, key, target in (
        ("first success [s]", "time_to_criterion_s", FIRST_SUCCESS_TARGET_S),
        ("flight quality [s]", "time_to_quality_s", QUALITY_TARGET_S),
    ):
        ours_s = median_time(key)
        finite = math.isfinite(ours_s)
        rows.append(
            {
                "figure (median over seeds)": name,
                "robot-rl": ours_s if finite else f"> {budget:g}",
                "paper's training": paper,
                "robot-rl / paper": ours_s / paper if finite else None,
                "target": f"<= {target:g}",
                "met": "yes" if finite and ours_s <= target else "no",
            }
        )
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--task", default="quadrotor-hover")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--max-time", type=float, default=300.0, help="wall-clock budget per seed and trainer, s")
    p.add_argument("--set", dest="overrides", action="append", default=[], help="robot-rl config override (key=value)")
    p.add_argument("--no-sb3", action="store_true", help="skip the Stable-Baselines3 baseline")
    p.add_argument("--sb3-eval-every", type=float, default=10.0, help="seconds between SB3 evaluations")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads for both trainers")
    p.add_argument("--paper-checkout", type=Path, default=None, help="learning-to-fly checkout: run its training")
    p.add_argument("--paper-mkl-dir", type=Path, default=None, help="MKLConfig.cmake folder for the paper's build")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Run both trainers over the seeds and print the tables."""
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    print(
        f"{args.threads} torch threads, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset (OpenMP default)')}"
    )
    base = load_config(args.task, None, args.overrides)  # fail fast on a bad override; SB3 shares env, device, eval
    with tempfile.TemporaryDirectory(prefix="robot-rl-ttc-") as tmp:
        paper: PaperBuild | None = None
        if args.paper_checkout is not None:
            paper = build_paper_training(args.paper_checkout, Path(tmp) / "paper", args.paper_mkl_dir)
            print(f"the paper's training: {args.paper_checkout} at {paper.commit}, {paper.backend} backend")
        ours, paper_s = [], []
        for seed in args.seeds:
            print(f"robot-rl seed {seed} (budget {args.max_time:g} s) ...", flush=True)
            ours.append(run_robot_rl(args.task, seed, args.max_time, args.overrides, Path(tmp)))
            if paper is not None:
                paper_s.append(run_paper_training(paper))
                print(f"the paper's training: {paper_s[-1]:.1f} s for {PAPER_STEPS:,} env steps", flush=True)
        episodes = base.runner.eval_episodes
        print(f"\nrobot-rl on {args.task}, per seed (final eval: {episodes} randomised episodes after the budget):")
        print(format_table(ours))
        ttc = median_ttc(ours)
        print(
            f"median time to criterion: {f'{ttc:.1f} s' if math.isfinite(ttc) else f'not met (> {args.max_time:g} s)'}"
        )
        if paper is None:
            print("the paper's training: not run (give --paper-checkout PATH; see bench/paper_training.py)")
        else:
            print(f"\nbeside the paper's training ({paper.backend} backend; one run after each robot-rl seed):")
            print(format_table(paper_rows(ours, paper_s, args.max_time)))
        if args.no_sb3:
            return
        sb3 = []
        for seed in args.seeds:
            print(f"\nSB3 PPO seed {seed} (budget {args.max_time:g} s) ...", flush=True)
            result = run_sb3_baseline(
                args.task,
                args.max_time,
                seed,
                overrides=args.overrides,
                device=base.device,
                eval_every_s=args.sb3_eval_every,
                eval_episodes=base.runner.eval_episodes,
            )
            sb3.append(sb3_row(result))
        print(f"\nSB3 PPO on {args.task}, per seed:")
        print(format_table(sb3))
        print(f"\nside by side ({len(args.seeds)} seed(s), {args.max_time:g} s budget each):")
        print(format_table(comparison_rows(ours, sb3, args.max_time)))


if __name__ == "__main__":
    main()
